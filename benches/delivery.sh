#!/usr/bin/env bash
# Cost of `delivery: copy` against a bind mount: a zone of 1,000 files / 100 MiB
# (1,000 x 100 KiB of random data), on bwrap and docker.
#
#   in   the worker reads every file (`cat`), changes nothing: copy = copy-in + walk,
#        check and hash of the whole tree after the run, nothing published;
#   out  the worker copies the 1,000 files to a new directory (`cp -r`): copy = copy-in +
#        check + publish of 1,000 new files / 100 MiB (removed again before each run);
#   chg  the worker appends a line to each of the 1,000 files: copy = copy-in + check +
#        publish of 1,000 changed files / 100 MiB (each host file judged again, its content
#        hashed, at the moment it is swapped).
#
# BACKENDS (default "bwrap docker") picks the backends.
# Usage: benches/delivery.sh [WORKCELL_BINARY] [RUNS]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   RUNS             default: 5 per command
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
runs=${2:-5}
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 1; }

base=$(mktemp -d)
chmod 755 "$base"  # workers run as an unprivileged user when this runs as root
trap 'rm -rf "$base"' EXIT
for mode in bind copy; do
  mkdir -p "$base/$mode/z/src"
  cat > "$base/$mode/workcell.yaml" <<YAML
sandbox:
  zones:
    z: {path: ./z, mode: rw, delivery: $mode, approval: {write: preApproved, delete: preApproved}}
YAML
done
head -c $((1000 * 102400)) /dev/urandom | split -b 102400 -a 3 -d --additional-suffix=.bin - "$base/bind/z/src/f"
cp -r "$base/bind/z/src/." "$base/copy/z/src/"
# The project's owner is who workers run as (when this runs as root).
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$base/bind" "$base/copy"
echo "zone: $(ls "$base/bind/z/src" | wc -l) files, $(du -sm "$base/bind/z/src" | cut -f1) MiB"

args=()
for backend in ${BACKENDS:-bwrap docker}; do
  for mode in bind copy; do
    p="$base/$mode"
    args+=(-n "$backend $mode in"  "cd $p && $workcell run --backend $backend --no-broker -- sh -c 'cat /z/src/* > /dev/null'")
    args+=(-n "$backend $mode out" "cd $p && rm -rf z/new && $workcell run --backend $backend --no-broker -- sh -c 'cp -r /z/src /z/new' 2>/dev/null && test \$(ls z/new | wc -l) = 1000")
    args+=(-n "$backend $mode chg" "cd $p && rm -rf z/new && $workcell run --backend $backend --no-broker -- sh -c 'for f in /z/src/*; do echo >> \$f; done' 2>/dev/null && test \$(stat -c %s z/src/f999.bin) -gt 102400")
  done
done
hyperfine --warmup 1 --runs "$runs" --export-markdown "${BENCH_MD:-/dev/stdout}" "${args[@]}"
