#!/usr/bin/env bash
# Paired launch cost of two workcell binaries (e.g. before and after a change) and raw bwrap,
# in alternating blocks in one project, so that drift hits all three alike.
# Usage: benches/bwrap-pair.sh OLD_BINARY NEW_BINARY [BLOCKS] [RUNS_PER_BLOCK]
set -euo pipefail
old=$1; new=$2; blocks=${3:-6}; runs=${4:-25}
dir=$(mktemp -d); chmod 755 "$dir"; cd "$dir"; mkdir in out
# As root the worker is nobody (README, "Running as root"): give it the writable zone.
[ "$(id -u)" != 0 ] || chown 65534:65534 out
printf 'sandbox:\n  zones:\n    in: {path: ./in, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n' > workcell.yaml
raw=$($new plan --backend bwrap -- true | sed -n 2p)
for i in $(seq 1 "$blocks"); do
  for which in raw old new; do
    case $which in raw) cmd="$raw";; old) cmd="$old run --backend bwrap --no-broker -- true";; new) cmd="$new run --backend bwrap --no-broker -- true";; esac
    hyperfine -N --runs "$runs" --warmup 3 --export-json "/tmp/pair-$which-$i.json" "$cmd" >/dev/null 2>&1
  done
done
python3 - "$blocks" <<'PY'
import json, statistics, sys
n = int(sys.argv[1])
for w in ("raw", "old", "new"):
    t = [x for i in range(1, n + 1) for x in json.load(open(f"/tmp/pair-{w}-{i}.json"))["results"][0]["times"]]
    print(f"{w:4} median {statistics.median(t)*1000:6.2f} ms  mean {statistics.mean(t)*1000:6.2f} ms  n={len(t)}")
PY
rm -rf "$dir"
