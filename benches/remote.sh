#!/usr/bin/env bash
# Cost of a remote engine (issue 27): `workcell run` of one command (the worker reads the
# whole zone: `cat /z/* > /dev/null`) with a zone of 1, 10 and 100 MB (one file of random
# data each), on the local engines, where the zone is bind-mounted, against the same command
# on an engine on a "second host" (`.ci/remote-engine`: Podman's service in its own network
# and mount namespaces, reached over TCP on a veth pair), where workcell ships the zone into
# an engine-side volume through the Engine API (and, for a rw zone, brings it back after the
# run to compare and publish). The local Podman service (.ci/setup-podman) is included when
# it answers: it is the same engine as the remote one, so that pair isolates the shipping.
#
# Usage (as root; needs hyperfine, docker CLI, podman, iproute2, busybox-static):
#   cargo build --release
#   benches/remote.sh [WORKCELL_BINARY] [RUNS]
#     WORKCELL_BINARY  default: target/release/workcell
#     RUNS             default: 10 per command
#   MODE=rw            a rw, pre-approved zone (the worker changes nothing): also the download
#                      and comparison after the run. Default: ro (upload only).
#   SIZES="1 10 100"   the zone sizes, in MB.
#   BENCH_MD=FILE      where hyperfine's markdown table goes (default: target/bench/remote.md,
#                      printed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."

workcell=$(realpath -m "${1:-target/release/workcell}")
runs=${2:-10}
mode=${MODE:-ro}
sizes=${SIZES:-1 10 100}
[ -x "$workcell" ] || { echo "no workcell binary at $workcell (cargo build --release)" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 1; }
[ -x /usr/bin/busybox ] || { echo "the image needs a static busybox (apt-get install busybox-static)" >&2; exit 1; }
case "$mode" in ro | rw) ;; *) echo "MODE is ro or rw" >&2; exit 2 ;; esac

base=$(mktemp -d)
chmod 755 "$base"  # workers run as an unprivileged user when this runs as root
engine="wcr-bench-$$"
tag=workcell-bench-remote:busybox
podman_sock=${WORKCELL_PODMAN_SOCKET:-/run/wc-podman/podman.sock}
declare -A engines=([local-docker]="")
if docker -H "unix://$podman_sock" version >/dev/null 2>&1; then
  engines[local-podman]="unix://$podman_sock"
fi

cleanup() {
  .ci/remote-engine down "$engine" || true
  for name in "${!engines[@]}"; do
    [ "$name" = remote ] && continue
    DOCKER_HOST=${engines[$name]} docker rmi -f "$tag" >/dev/null 2>&1 || true
  done
  rm -rf "$base"
}
trap cleanup EXIT

engines[remote]=$(.ci/remote-engine up "$engine" --owner $$)

# One image on every engine: busybox and a link per command in /bin (`sh`, `cat`).
ctx="$base/ctx"
mkdir -p "$ctx/bin"
cp /usr/bin/busybox "$ctx/bin/"
for applet in $(/usr/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -s busybox "$ctx/bin/$applet"
done
printf 'FROM scratch\nCOPY bin /bin\nENV PATH=/bin\nUSER 65534:65534\n' >"$ctx/Dockerfile"
for name in "${!engines[@]}"; do
  DOCKER_HOST=${engines[$name]} docker build -q -t "$tag" "$ctx" >/dev/null
done

approval=""
[ "$mode" = rw ] && approval=", approval: {write: preApproved, delete: preApproved}"
for mb in $sizes; do
  p="$base/p$mb"
  mkdir -p "$p/z"
  head -c $((mb * 1000 * 1000)) /dev/urandom >"$p/z/blob"
  printf 'sandbox:\n  zones:\n    z: {path: ./z, mode: %s%s}\n' "$mode" "$approval" >"$p/workcell.yaml"
done
# The project's owner is who workers run as (when this runs as root).
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$base"/p*

args=()
for mb in $sizes; do
  for name in local-docker local-podman remote; do
    [ -n "${engines[$name]+set}" ] || continue
    host=${engines[$name]}
    env="env -u DOCKER_HOST"
    [ -n "$host" ] && env="env DOCKER_HOST=$host"
    args+=(-n "$name ${mb} MB" "cd $base/p$mb && $env $workcell run --backend docker --image $tag -- sh -c 'cat /z/* > /dev/null'")
  done
done
echo "zones: ${sizes// / MB, } MB ($mode); engines: ${!engines[*]} (remote: ${engines[remote]})"
md=${BENCH_MD:-target/bench/remote.md}
mkdir -p "$(dirname "$md")"
hyperfine --warmup 1 --runs "$runs" --export-markdown "$md" "${args[@]}"
cat "$md"

# Nothing may be left behind on any engine, and the zones are as they were.
# On the local engines only this script's projects count (other runs may be going on).
for name in "${!engines[@]}"; do
  export DOCKER_HOST=${engines[$name]}
  if [ "$name" = remote ]; then
    left=$(docker ps -aq --filter label=dev.workcell.managed=true; docker volume ls -q --filter label=dev.workcell.managed=true)
  else
    left=$(for mb in $sizes; do docker ps -aq --filter "label=dev.workcell.project=$base/p$mb"; done)
  fi
  [ -z "$left" ] || { echo "left on $name: $left" >&2; exit 1; }
done
unset DOCKER_HOST
for mb in $sizes; do
  [ "$(ls "$base/p$mb/z")" = blob ] || { echo "zone of $mb MB changed: $(ls "$base/p$mb/z")" >&2; exit 1; }
done
