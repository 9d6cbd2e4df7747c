#!/usr/bin/env bash
# MCP `shell` call latency (issue 26): `workcell mcp` on docker and bwrap vs llm-sandbox's
# session exec vs the `docker exec` CLI, side by side in one run (benches/mcp_shell.py).
#
# Usage: benches/mcp-shell.sh [WORKCELL_BINARY] [CALLS] [WARMUP]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   CALLS / WARMUP   default: 100 / 5 per method
#   BACKENDS         workcell backends (default "docker bwrap")
#   PYTHON           a python with `mcp` and `llm-sandbox[docker]==0.3.46` (default python3)
#
# llm-sandbox and `docker exec` need an image and there is no registry: this builds a local one
# (FROM scratch + the host's busybox-static: `true`, `sh`, `sleep`; an /etc/passwd with root), removed again at the end.
# The workcell project is one rw zone with `image: host` (workcell's own local base image).
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
calls=${2:-100}
warmup=${3:-5}
python=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
image=workcell-bench-busybox:local
busybox=$(command -v busybox) || { echo "busybox (static) is required (apt-get install busybox-static)" >&2; exit 1; }
"$python" -c 'import mcp, llm_sandbox' || { echo "$python needs: pip install mcp 'llm-sandbox[docker]==0.3.46'" >&2; exit 1; }

dir=$(mktemp -d)
chmod 755 "$dir"  # workers run as an unprivileged user when this runs as root
cleanup() {
  # Containers of this script (llm-sandbox's and the exec target), then workcell's for the
  # project, then the image: also after Ctrl-C or a failed call.
  # Bounded: a daemon that does not answer must not keep Ctrl-C from ending this script.
  timeout 60 docker ps -aq --filter label=dev.workcell.bench=mcp-shell | xargs -r timeout 60 docker rm -f >/dev/null || true
  timeout 60 docker ps -aq --filter label=dev.workcell.project="$dir/project" | xargs -r timeout 60 docker rm -f >/dev/null || true
  timeout 60 docker rmi -f "$image" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$dir/image/rootfs/bin" "$dir/image/rootfs/etc" "$dir/image/rootfs/tmp" "$dir/project/work"
cp "$busybox" "$dir/image/rootfs/bin/busybox"
for a in true sh sleep; do ln -s busybox "$dir/image/rootfs/bin/$a"; done
# llm-sandbox starts its container as the user `root`, which Docker looks up here.
echo 'root:x:0:0:root:/:/bin/sh' > "$dir/image/rootfs/etc/passwd"
echo 'root:x:0:' > "$dir/image/rootfs/etc/group"
printf 'FROM scratch\nCOPY rootfs/ /\nCMD ["/bin/sleep", "2147483647"]\n' > "$dir/image/Dockerfile"
out=$(docker build -q --label dev.workcell.bench=mcp-shell -t "$image" "$dir/image" 2>&1) || { echo "$out" >&2; exit 1; }

cat > "$dir/project/workcell.yaml" <<'YAML'
sandbox:
  zones:
    work: {path: ./work, mode: rw, approval: {write: preApproved, delete: preApproved}}
defaults:
  image: host
YAML
# The project's owner is who workers run as (when this runs as root).
[ "$(id -u)" != 0 ] || chown -R 65534:65534 "$dir/project"
# Build workcell's host base image outside the measurement.
(cd "$dir/project" && "$workcell" run --backend docker -- true)

echo "workcell: $workcell ($("$workcell" --version)); $("$python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"), "llm-sandbox", m.version("llm-sandbox"))')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" "$here/mcp_shell.py" "$workcell" "$dir/project" "$image" "$calls" "$warmup"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Nothing of workcell's may be left behind once the servers have ended.
left=$(docker ps -aq --filter label=dev.workcell.project="$dir/project")
[ -z "$left" ] || { echo "left behind: workcell containers $left" >&2; exit 1; }
