#!/usr/bin/env bash
# Launch overhead of `workcell run --backend bwrap` against the same sandbox started by
# raw bwrap (the command line `workcell plan --backend bwrap` prints).
#
# Usage: benches/bwrap-run.sh [WORKCELL_BINARY] [RUNS]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   RUNS             default: 50 (hyperfine, 5 warmup runs, no intermediate shell)
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
runs=${2:-50}
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 1; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/in" "$dir/out"
cd "$dir"
# The same zones as the --zone flags below, so `plan` renders the identical sandbox.
cat > workcell.yaml <<'YAML'
sandbox:
  zones:
    in: {path: ./in, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
YAML

raw=$("$workcell" plan --backend bwrap -- true | sed -n 2p)
echo "raw bwrap command: $raw"
hyperfine -N --warmup 5 --runs "$runs" --export-markdown "$dir/result.md" --export-json "$dir/result.json" \
  -n "raw bwrap" "$raw" \
  -n "workcell run --backend bwrap" "$workcell run --backend bwrap --zone in=./in:ro --zone out=./out:rw -- true" \
  -n "workcell run --backend bwrap --no-broker" "$workcell run --backend bwrap --no-broker --zone in=./in:ro --zone out=./out:rw -- true"
python3 - "$dir/result.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
raw = r["raw bwrap"]
print(f"raw bwrap: mean {raw['mean']*1e3:.2f} ms, median {raw['median']*1e3:.2f} ms")
# The raw line has no broker mount, so `--no-broker` is the like-for-like comparison; the
# default run (with the broker) shows what the broker costs on top.
for name in ["workcell run --backend bwrap --no-broker", "workcell run --backend bwrap"]:
    wc = r[name]
    print(f"{name}: mean {wc['mean']*1e3:.2f} ms, median {wc['median']*1e3:.2f} ms, ratio mean {wc['mean']/raw['mean']:.2f}x, median {wc['median']/raw['median']:.2f}x")
PY
