#!/usr/bin/env bash
# What a person notices of the sweep for files the host runs: `workcell run --backend bwrap
# -- true` in a project whose rw zone is empty, and in one whose rw zone holds 100,000
# files (1,000 directories × 100 files, plus a git repository), page cache warm.
# Usage: bash benches/quarantine-run.sh [WORKCELL_BINARY]   (figures: BENCHMARKS.md)
set -euo pipefail
bin=${1:-target/release/workcell}
bin=$(realpath "$bin")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/empty/zone" "$tmp/full/zone"
python3 - "$tmp/full/zone" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(1000):
    p = os.path.join(root, "d%02d" % (d // 100), "e%04d" % d)
    os.makedirs(p)
    for f in range(100):
        with open(os.path.join(p, "f%03d.txt" % f), "w") as fh:
            fh.write("x")
PY
git -C "$tmp/full/zone" init -q
if [ "$(id -u)" = 0 ]; then chown -R 1000:1000 "$tmp"; fi
hyperfine -N --warmup 2 --runs ${RUNS:-20} \
  -n empty-zone "sh -c 'cd $tmp/empty && $bin run --backend bwrap --zone z=./zone:rw -- true'" \
  -n 100k-file-zone "sh -c 'cd $tmp/full && $bin run --backend bwrap --zone z=./zone:rw -- true'"
