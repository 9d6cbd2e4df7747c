#!/usr/bin/env bash
# Cost against the checkout's size (issue 38): what a `workcell mcp` `shell` call and a
# `workcell run --backend bwrap -- true` cost when the writable zone is a git repository of
# 0, 200,000 and 1,000,000 empty files (1,000 files per directory), page cache warm.
#
# Usage: benches/checkout-size.sh [WORKCELL_BINARY] [CALLS] [WARMUP]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   CALLS / WARMUP   `shell` calls of `true` per backend and size, default 100 / 5
#                    (benches/checkout_size.py: one server per backend, calls interleaved)
#   SIZES            files in the zone, default "0 200000 1000000" (the 1,000,000 takes minutes
#                    to set up: SIZES="0 200000" to leave it out)
#   BACKENDS         for the `shell` calls, default "bwrap docker" (docker: `image: host`)
#   RUNS             hyperfine runs of `workcell run --backend bwrap -- true` per size
#                    (`hyperfine -N`, 2 warm-up), default 20
#   PYTHON           a python with the `mcp` SDK (default python3), e.g.
#                    python3 -m venv /tmp/bench-venv && /tmp/bench-venv/bin/pip install mcp
# Needs hyperfine and git; docker for the docker backend. Run it as root: the projects are
# then given to 65534 (as benches/mcp-shell.sh), so workers run as that unprivileged user.
#
# Each size is one project (`workcell.yaml`: zone `work: ./work`, rw, pre-approved; `image:
# host`) whose zone is a git repository with every file committed (`git init; git add -A;
# git commit`; size 0: one empty commit). Per size: set up, one run on each backend outside
# the measurement (builds workcell's host image on the first), hyperfine, then the `shell`
# calls. Prints each size's set-up and measuring time and the load average, then one table.
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
calls=${2:-100}
warmup=${3:-5}
sizes=${SIZES:-0 200000 1000000}
backends=${BACKENDS:-bwrap docker}
runs=${RUNS:-20}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 1; }
"$python" -c 'import mcp' || { echo "$python needs: pip install mcp" >&2; exit 1; }

dir=$(mktemp -d)
chmod 755 "$dir"  # workers run as an unprivileged user when this runs as root
cleanup() {
  # workcell's containers for these projects (also after Ctrl-C or a failed call), then the trees.
  # Bounded: a daemon that does not answer must not keep Ctrl-C from ending this script.
  for p in "$dir"/files-*; do
    [ -d "$p" ] || continue
    timeout 60 docker ps -aq --filter label=dev.workcell.project="$p" 2>/dev/null | xargs -r timeout 60 docker rm -f >/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

load() { cut -d' ' -f1-3 /proc/loadavg; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

echo "workcell: $workcell ($("$workcell" --version)); mcp $("$python" -c 'import importlib.metadata as m; print(m.version("mcp"))'); $(hyperfine --version)"
echo "sizes: $sizes; $calls calls after $warmup warm-up per backend ($backends); $runs runs of \`run\`"
echo "load average before: $(load)"

rows=()
for n in $sizes; do
  p=$dir/files-$n
  echo
  echo "== $n files: set-up (load $(load))"
  t0=$EPOCHREALTIME
  mkdir -p "$p/work"
  cat > "$p/workcell.yaml" <<'YAML'
sandbox:
  zones:
    work: {path: ./work, mode: rw, approval: {write: preApproved, delete: preApproved}}
defaults:
  image: host
YAML
  python3 - "$p/work" "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    if i % 1000 == 0:
        d = os.path.join(root, "d%04d" % (i // 1000))
        os.mkdir(d)
    open(os.path.join(d, "f%04d" % (i % 1000)), "w").close()
PY
  git -C "$p/work" init -q
  git -C "$p/work" add -A
  git -C "$p/work" -c user.name=bench -c user.email=bench@localhost commit -q --allow-empty -m "$n files"
  # The project's owner is who workers run as (when this runs as root).
  [ "$(id -u)" != 0 ] || chown -R 65534:65534 "$p"
  # One run per backend outside the measurement (the first docker one builds the host image).
  for b in bwrap $backends; do (cd "$p" && "$workcell" run --backend "$b" -- true); done
  t1=$EPOCHREALTIME
  setup=$(secs "$t0" "$t1")
  echo "set up in ${setup} s: $(find "$p/work" -mindepth 1 -path "$p/work/.git" -prune -o -type f -print | wc -l) files"

  l=$(load)
  echo "== $n files: \`workcell run --backend bwrap -- true\` (load $l)"
  (cd "$p" && hyperfine -N --warmup 2 --runs "$runs" --export-json "$dir/run-$n.json" \
    -n "run, $n files" "$workcell run --backend bwrap -- true")
  echo "== $n files: \`shell\` calls (load $(load))"
  BACKENDS=$backends "$python" "$here/checkout_size.py" "$workcell" "$p" "$calls" "$warmup" | tee "$dir/mcp-$n.txt"
  t2=$EPOCHREALTIME
  measure=$(secs "$t1" "$t2")
  echo "measured in ${measure} s (load after: $(load))"
  run=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print("%.1f ± %.1f | %.1f" % (r["mean"] * 1e3, r["stddev"] * 1e3, r["median"] * 1e3))' "$dir/run-$n.json")
  mcp=$(awk '{ printf "%s / %s | ", $2, $3 }' "$dir/mcp-$n.txt")
  rows+=("| $n | $mcp$run | ${l%% *} | $setup | $measure |")

  # Nothing of workcell's may be left behind once the servers have ended.
  left=$(docker ps -aq --filter label=dev.workcell.project="$p" 2>/dev/null || true)
  [ -z "$left" ] || { echo "left behind: workcell containers $left" >&2; exit 1; }
done

echo
echo "load average after: $(load)"
echo
echo "milliseconds; \`shell\` call: p50 / p90 of $calls; run: hyperfine -N, $runs runs; load: 1-min average before measuring; set-up and measuring in seconds"
echo
head="| files |"; rule="|---:|"
for b in $backends; do head+=" \`shell\` $b p50 / p90 |"; rule+="---:|"; done
echo "$head \`run\` bwrap mean ± σ | median | load | set-up s | measured s |"
echo "$rule---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
