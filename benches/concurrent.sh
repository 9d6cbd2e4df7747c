#!/usr/bin/env bash
# N concurrent `workcell run -- true` per backend (issue 26): wall time of the batch, peak RSS
# of a workcell process (GNU time's maximum resident set size of each run: workcell and the
# children it waits for, such as bwrap; the largest and the median), and a check that nothing
# is left behind. Exits non-zero when a run failed or something was left.
#
# Usage: benches/concurrent.sh [WORKCELL_BINARY] [N]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   N                default: 50 concurrent runs per backend
#   BACKENDS         default "bwrap docker"
#
# Left behind means, for the runs of this script (their ids from the project's audit log):
# a container of the project (label dev.workcell.project), a network
# workcell-ID, a cgroup workcell-ID anywhere under /sys/fs/cgroup, a docker staging directory
# /run/workcell-staging/ID, a process running this workcell binary (the `__reap` watchdogs
# included) or with its working directory in the project (bwrap), and anything in the private
# TMPDIR the runs are given (broker directories, `workcell-*` copies).
# Things are given a moment to go (the watchdogs exit after their run): up to 30 s.
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
n=${2:-50}
[ -x /usr/bin/time ] || { echo "GNU time is required (apt-get install time)" >&2; exit 1; }

dir=$(mktemp -d)
chmod 755 "$dir"  # workers run as an unprivileged user when this runs as root
pids=()
cleanup() {
  # Ctrl-C: stop the runs still going (only ours: the workcell under each of our `time`
  # processes, by parent pid; SIGTERM lets it remove its sandbox), then what they left.
  for t in "${pids[@]}"; do pkill -TERM -P "$t" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # Bounded: a wedged daemon must not keep Ctrl-C from ending this script.
  timeout 60 docker ps -aq --filter label=dev.workcell.project="$dir/project" 2>/dev/null | xargs -r timeout 60 docker rm -f >/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

p=$dir/project
mkdir -p "$p/in" "$p/out" "$dir/tmp" "$dir/out"
cat > "$p/workcell.yaml" <<'YAML'
sandbox:
  zones:
    in: {path: ./in, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
YAML
# The project's owner is who workers run as (when this runs as root).
[ "$(id -u)" != 0 ] || chown -R 65534:65534 "$p"
# Broker directories and copies go to TMPDIR (with TMPDIR set, not /dev/shm) unless there is
# a private XDG_RUNTIME_DIR: without one, everything the runs make in a temp dir is in ours.
export TMPDIR=$dir/tmp
unset XDG_RUNTIME_DIR
# This shell stays outside the project, so that a process whose working directory is in the
# project is one of the runs' (bwrap keeps the directory workcell was started in).
cd "$dir"

# What this script's runs left: one line per thing, empty when nothing.
leftovers() {
  local ids id
  ids=$(grep -ho '"run_id":"[0-9a-f]*","event":"run_start"' "$p/.workcell/audit.jsonl" | cut -d'"' -f4 | sort -u || true)
  # The daemon's answers are bounded in time: one that does not answer is reported once (Docker
  # 20.10's libnetwork can deadlock under many concurrent starts; see BENCHMARKS.md).
  local docker_ok=true
  timeout 20 docker ps -a --filter label=dev.workcell.project="$p" --format 'container {{.Names}}' \
    || { docker_ok=false; echo "docker: the daemon did not answer within 20 s"; }
  for id in $ids; do
    if $docker_ok; then
      timeout 20 docker network ls -q --filter name="^workcell-$id\$" | sed "s/^/network workcell-$id /" \
        || { docker_ok=false; echo "docker: the daemon did not answer within 20 s"; }
    fi
    [ ! -e "/run/workcell-staging/$id" ] || echo "staging /run/workcell-staging/$id"
  done
  [ -z "$ids" ] || find /sys/fs/cgroup -maxdepth 8 -type d -name 'workcell-*' 2>/dev/null | grep -F "$(sed 's/^/workcell-/' <<<"$ids")" | sed 's/^/cgroup /' || true
  for proc in /proc/[0-9]*; do
    { [ "$(readlink "$proc/exe" 2>/dev/null)" = "$workcell" ] || [[ "$(readlink "$proc/cwd" 2>/dev/null)" == "$p"* ]]; } \
      && echo "process ${proc#/proc/} $(tr '\0' ' ' < "$proc/cmdline" 2>/dev/null)"
  done
  find "$TMPDIR" -mindepth 1 -maxdepth 1 | sed 's/^/temp /'
}

status=0
echo "workcell: $workcell; $n concurrent \`workcell run --backend B -- true\` per backend; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| backend | runs | failed | wall time | per run (wall / N) | peak RSS max | peak RSS median | left behind |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
for backend in ${BACKENDS:-bwrap docker}; do
  # One run first, outside the measurement (the docker host base image is built once).
  (cd "$p" && "$workcell" run --backend "$backend" -- true)
  rm -f "$dir"/out/*
  pids=()
  start=$(date +%s%N)
  for i in $(seq "$n"); do
    (cd "$p" && exec /usr/bin/time -f '%M %x' -o "$dir/out/$backend.$i.time" "$workcell" run --backend "$backend" -- true \
      >"$dir/out/$backend.$i.log" 2>&1) &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
  wall=$(( ($(date +%s%N) - start) / 1000000 ))
  pids=()
  # The last line of each: "RSS-in-KiB exit-status" (a failed run has a line before it).
  rss=$(for f in "$dir"/out/"$backend".*.time; do tail -1 "$f" | cut -d' ' -f1; done | sort -n)
  max=$(tail -1 <<<"$rss")
  median=$(sed -n "$(( (n + 1) / 2 ))p" <<<"$rss")
  # Give the watchdogs and the daemon a moment to finish what the runs started.
  for _ in $(seq 150); do
    left=$(leftovers)
    [ -n "$left" ] && ! grep -q 'did not answer' <<<"$left" || break
    sleep 0.2
  done
  verdict="nothing ($(grep -c '"event":"run_start"' "$p/.workcell/audit.jsonl") run ids checked)"
  [ -z "$left" ] || verdict="$(wc -l <<<"$left") things (below)"
  awk -v b="$backend" -v n="$n" -v f="$failed" -v w="$wall" -v m="$max" -v md="$median" -v v="$verdict" \
    'BEGIN { printf "| %s | %d | %d | %.2f s | %.0f ms | %.1f MiB | %.1f MiB | %s |\n", b, n, f, w / 1000, w / n, m / 1024, md / 1024, v }'
  if [ "$failed" != 0 ]; then
    status=1
    echo "failed runs ($backend), first log:" >&2
    first=$(awk '$NF != 0 { print FILENAME; exit }' "$dir"/out/"$backend".*.time)
    cat "${first%.time}.log" >&2
  fi
  if [ -n "$left" ]; then status=1; echo "left behind ($backend):" >&2; echo "$left" >&2; fi
done
exit "$status"
