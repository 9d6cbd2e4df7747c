#!/usr/bin/env bash
# gVisor vs runc: `workcell run --backend docker -- true` under the daemon's default runtime
# (runc) and under `--runtime runsc`, same image (`image: host`), zones and limits; plus the
# same command with a broker call, the path a worker that uses tools takes.
#
# Needs: a running Docker daemon with runsc registered (.ci/setup-runsc), hyperfine.
# Usage: benches/docker-runtime.sh [RUNS]. Results go to stdout and target/bench/docker-runtime.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
cargo build --release --quiet --bin workcell
W=$PWD/target/release/workcell
OUT=$PWD/target/bench
mkdir -p "$OUT"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/in" "$D/out"
echo hello > "$D/in/a.txt"
cd "$D"
"$W" doctor | grep -q 'runtimes:.*runsc' || { echo "runsc is not registered with the daemon: run .ci/setup-runsc" >&2; exit 1; }

ZONES="--zone in=$D/in:ro --zone out=$D/out:rw"
# One broker call from inside (read_file through the socket), then exit.
CALL='curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H "Content-Type: application/json" --data-binary "{\"path\":\"/in/a.txt\"}" http://workcell/v1/tools/read_file >/dev/null'
# Build the host base image once, outside the measurement, and check both runtimes answer.
"$W" run --backend docker $ZONES -- true
"$W" run --backend docker --runtime runsc $ZONES -- sh -c "$CALL"

hyperfine --warmup 3 --runs "$RUNS" --export-markdown "$OUT/docker-runtime.md" --export-json "$OUT/docker-runtime.json" \
  -n "runc: true" "$W run --backend docker $ZONES -- true" \
  -n "runsc: true" "$W run --backend docker --runtime runsc $ZONES -- true" \
  -n "runc: broker call" "$W run --backend docker $ZONES -- sh -c '$CALL'" \
  -n "runsc: broker call" "$W run --backend docker --runtime runsc $ZONES -- sh -c '$CALL'"
cat "$OUT/docker-runtime.md"
# Nothing may be left behind.
test -z "$(docker ps -aq --filter label=dev.workcell.project="$D")"
