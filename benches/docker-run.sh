#!/usr/bin/env bash
# Docker launch latency: `workcell run -- true` vs `docker run --rm` with the same image,
# mounts and hardening flags vs the bare Engine API (create+start+wait+remove, no attach).
#
# Needs: a running Docker daemon, hyperfine, python3. Usage: benches/docker-run.sh [RUNS]
# Results go to stdout and target/bench/docker-run.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-30}
cargo build --release --quiet --bin workcell --example raw_api
W=$PWD/target/release/workcell
RAW=$PWD/target/release/examples/raw_api
OUT=$PWD/target/bench
mkdir -p "$OUT"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
mkdir -p "$D/in" "$D/out"
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

echo "workcell: $W run --backend docker ${ZONES[*]} -- true"
echo "docker:   $DOCKER_RUN"
echo "raw API:  $RAW plan.json"
hyperfine -N --warmup 3 --runs "$RUNS" --export-markdown "$OUT/docker-run.md" --export-json "$OUT/docker-run.json" \
  -n "workcell run" "$W run --backend docker --zone in=$D/in:ro --zone out=$D/out:rw -- true" \
  -n "docker run --rm" "$DOCKER_RUN" \
  -n "raw Engine API" "$RAW $D/plan.json"
cat "$OUT/docker-run.md"
# Nothing may be left behind.
test -z "$(docker ps -aq --filter label=dev.workcell.project="$D")"
