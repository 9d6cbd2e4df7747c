#!/usr/bin/env bash
# Warm vs cold vs `docker run --rm` for `workcell run -- true` on docker (issue 26, item 6),
# side by side with hyperfine in one run:
#   cold             `workcell run --backend docker -- true`: a new container per run;
#   docker run --rm  the same image, mounts and hardening flags (rendered from
#                    `workcell plan --json`, as benches/docker-run.sh does);
#   warm (pool)      the same run claiming a pre-started sandbox: before each timed run,
#                    `workcell pool fill --size 1` (not timed) leaves one ready. The timed
#                    run includes ending the container (the daemon's removal of it, with
#                    AutoRemove, happens after workcell has exited).
# Goal of the issue: warm <= 0.2x `docker run --rm`.
#
# Usage: benches/warm-run.sh [WORKCELL_BINARY] [RUNS]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   RUNS             default: 30 per command
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
runs=${2:-30}
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 1; }

dir=$(mktemp -d)
chmod 755 "$dir"  # workers run as an unprivileged user when this runs as root
pool=false
"$workcell" pool --help >/dev/null 2>&1 && pool=true
cleanup() {
  # Also after Ctrl-C: pooled sandboxes, then any container of the project.
  # Bounded: a daemon that does not answer must not keep Ctrl-C from ending this script.
  if $pool; then (cd "$dir" && timeout 60 "$workcell" pool drain >/dev/null 2>&1) || true; fi
  timeout 60 docker ps -aq --filter label=dev.workcell.project="$dir" | xargs -r timeout 60 docker rm -f >/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$dir/in" "$dir/out"
cd "$dir"
cat > workcell.yaml <<'YAML'
sandbox:
  zones:
    in: {path: ./in, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
defaults:
  image: host
YAML
# The project's owner is who workers run as (when this runs as root).
[ "$(id -u)" != 0 ] || chown -R 65534:65534 "$dir"
# Build the host base image once, outside the measurement.
"$workcell" run --backend docker -- true
"$workcell" plan --backend docker --json -- true > "$dir/plan.json"

# The equivalent `docker run` command line, from the same rendered settings.
docker_run=$(python3 - "$dir/plan.json" <<'PY'
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
echo "cold:            $workcell run --backend docker -- true"
echo "docker run --rm: $docker_run"

names=(-n "workcell run, cold" -n "docker run --rm")
cmds=("$workcell run --backend docker -- true" "$docker_run")
prepare=()
if $pool; then
  echo "warm (pool):     $workcell run --backend docker -- true, after \`pool fill --size 1\` (not timed)"
  names+=(-n "workcell run, warm (pool)")
  cmds+=("$workcell run --backend docker -- true")
  # One --prepare per command (hyperfine pairs them in order): only the warm one fills.
  prepare=(--prepare true --prepare true --prepare "$workcell pool fill --size 1")
else
  echo "warm (pool):     skipped: this workcell has no \`pool\` command"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# -N: no shell between hyperfine and the command.
hyperfine -N --warmup 3 --runs "$runs" --export-markdown "$dir/result.md" "${prepare[@]}" "${names[@]}" "${cmds[@]}"
cat "$dir/result.md"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Nothing may be left behind.
if $pool; then "$workcell" pool drain >/dev/null; fi
# (A warm run's container is removed by the daemon just after the run: give it a moment.)
for _ in $(seq 50); do
  left=$(docker ps -aq --filter label=dev.workcell.project="$dir")
  [ -z "$left" ] && break
  sleep 0.2
done
[ -z "$left" ] || { echo "left behind: containers $left" >&2; exit 1; }
