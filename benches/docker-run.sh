#!/usr/bin/env bash
# Docker launch latency: `workcell run -- true` vs `docker run --rm` with the same image,
# mounts and hardening flags vs the bare Engine API (create+start+wait+remove, no attach).
#
# Usage: benches/docker-run.sh [WORKCELL] [ROUNDS]
#   WORKCELL  a workcell binary to measure (default: this tree's, built in release)
#   ROUNDS    rounds of one run each, the order alternating from round to round (default 12)
# Prints each command's median and min and its ratio to `docker run --rm`, with the load
# average before and after; also written to target/bench/docker-run.md.
# Needs: a running Docker daemon, python3, and root or a user who may write a 0777 folder's
# files as the worker's uid (the `out` zone is made writable for the worker, 65534 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
W=""
if [ $# -gt 0 ] && [ -x "$1" ] && [ -f "$1" ]; then
  W=$(realpath "$1")
  shift
fi
ROUNDS=${1:-12}
cargo build --release --quiet --example raw_api
if [ -z "$W" ]; then
  cargo build --release --quiet --bin workcell
  W=$PWD/target/release/workcell
fi
RAW=$PWD/target/release/examples/raw_api
OUT=$PWD/target/bench
mkdir -p "$OUT"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/in" "$D/out"
# The worker runs as an unprivileged uid: it must reach the zones and may write `out`.
chmod 0755 "$D"
chmod 0777 "$D/out"
cd "$D"

ZONES=(--zone "in=$D/in:ro" --zone "out=$D/out:rw")
# Build the host base image once, outside the measurement.
"$W" run --backend docker "${ZONES[@]}" -- true

# The plan workcell would use, with its rendered Docker settings. `plan` has no --zone,
# so an equivalent project file declares the same two zones.
cat > "$D/workcell.yaml" <<YAML
sandbox:
  zones:
    in: {path: ./in, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
YAML
"$W" plan --json -- true > "$D/plan.json"

# The equivalent `docker run` command line, from the same rendered settings.
DOCKER_RUN=$(python3 - "$D/plan.json" <<'PY'
import json, shlex, sys
p = json.load(open(sys.argv[1]))
c = p["docker"]["create"]; h = c["HostConfig"]
a = ["docker", "run", "--rm", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
     "--network", h["NetworkMode"], "--pids-limit", str(h["PidsLimit"]), "--memory", str(h["Memory"]),
     "--memory-swap", str(h["MemorySwap"]), "-u", c["User"], "-w", c["WorkingDir"], "--hostname", c["Hostname"]]
if h.get("IpcMode"): a += ["--ipc", h["IpcMode"]]
if h.get("ShmSize"): a += ["--shm-size", str(h["ShmSize"])]
if h.get("Init"): a.append("--init")
for t, o in h["Tmpfs"].items(): a += ["--tmpfs", f"{t}:{o}"]
for m in h["Mounts"]:
    a += ["--mount", f"type=bind,src={m['Source']},dst={m['Target']}" + (",readonly" if m["ReadOnly"] else "")]
for e in c["Env"]: a += ["-e", e]
for k, v in c["Labels"].items(): a += ["--label", f"{k}={v}"]
ep = c.get("Entrypoint")
if ep: a += ["--entrypoint", ep[0]]
a.append(c["Image"])
if ep: a += ep[1:]
a += c["Cmd"]
print(shlex.join(a))
PY
)

WORKCELL_RUN="$W run --backend docker ${ZONES[*]} -- true"
echo "workcell: $WORKCELL_RUN"
echo "docker:   $DOCKER_RUN"
echo "raw API:  $RAW $D/plan.json"
# Alternating rounds (ABC, CBA, ...): a machine whose load drifts weighs on every command alike.
python3 - "$ROUNDS" "$OUT/docker-run.md" "$WORKCELL_RUN" "$DOCKER_RUN" "$RAW $D/plan.json" <<'PY'
import shlex, statistics, subprocess, sys, time
rounds, out = int(sys.argv[1]), sys.argv[2]
cmds = list(zip(["workcell run", "docker run --rm", "raw Engine API"], [shlex.split(c) for c in sys.argv[3:6]]))
load_before = open("/proc/loadavg").read().split()[:3]
times = {n: [] for n, _ in cmds}
def once(argv):
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000
for _, argv in cmds:  # one warm-up each
    once(argv)
for r in range(rounds):
    for n, argv in (cmds if r % 2 == 0 else cmds[::-1]):
        times[n].append(once(argv))
load_after = open("/proc/loadavg").read().split()[:3]
cli = statistics.median(times["docker run --rm"])
lines = [f"{rounds} alternating rounds; load average {' '.join(load_before)} before, {' '.join(load_after)} after", "",
         "| command | median | min | max | vs `docker run --rm` (median) |", "|---|---:|---:|---:|---:|"]
for n, _ in cmds:
    t = times[n]
    lines.append(f"| {n} | {statistics.median(t):.1f} ms | {min(t):.1f} ms | {max(t):.1f} ms | {statistics.median(t) / cli:.2f}× |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
# Nothing may be left behind.
test -z "$(docker ps -aq --filter label=dev.workcell.project="$D")"
