#!/usr/bin/env bash
# Egress proxy cost, docker and bwrap:
#   1. throughput of one large download through the proxy (network rules) vs direct
#      (network: true), from the same test server: a busybox httpd in a container of this
#      script's own on Docker's default bridge (nothing leaves the machine);
#   2. launch time of `workcell run -- true` with network: false, true, and rules.
#
# Needs: root (docker's egress firewall rules), a running Docker daemon, bubblewrap,
# hyperfine, python3, /usr/bin/busybox (busybox-static).
# Usage: benches/egress.sh [WORKCELL] [RUNS] [MIB]. Results go to stdout and target/bench/egress.md.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-}
RUNS=${2:-20}
MIB=${3:-256}
if [ -z "$W" ]; then
  cargo build --release --quiet --bin workcell
  W=$PWD/target/release/workcell
fi
W=$(realpath "$W")
OUT=$PWD/target/bench
mkdir -p "$OUT"
D=$(mktemp -d)
NAME=workcell-bench-web-$$
trap 'docker rm -f "$NAME" >/dev/null 2>&1 || true; rm -rf "$D"' EXIT

# The server: an image holding nothing but a page (FROM scratch), busybox mounted from the host.
mkdir -p "$D/img/www" "$D/www"
printf 'FROM scratch\nCOPY www /www\n' > "$D/img/Dockerfile"
docker build -q -t workcell-bench-web "$D/img" >/dev/null
head -c "$((MIB << 20))" /dev/zero > "$D/www/big"
docker run -d --name "$NAME" -v /usr/bin/busybox:/bin/busybox:ro -v "$D/www:/www:ro" \
  workcell-bench-web /bin/busybox httpd -f -p 8080 -h /www >/dev/null
IP=$(docker inspect -f '{{.NetworkSettings.IPAddress}}' "$NAME")
URL_DIRECT="http://$IP:8080/big"
URL_PROXY="http://big.test:8080/big"

mkdir -p "$D/p/work"
chmod 755 "$D" "$D/p" "$D/p/work"
project() { # network block
  cat > "$D/p/workcell.yaml" <<YAML
sandbox:
  zones:
    work: {path: ./work, mode: ro}
  network: $1
defaults:
  image: host
YAML
}
RULES="{allow: [\"big.test:8080\"], hosts: {big.test: $IP}}"

# The worker reads the whole body in 1 MiB pieces and prints MB/s (the launch not counted).
FETCH='import os,sys,time,urllib.request
os.environ.pop("no_proxy",None); os.environ.pop("NO_PROXY",None)
t=time.time(); r=urllib.request.urlopen(sys.argv[1]); n=0
while True:
    b=r.read(1<<20)
    if not b: break
    n+=len(b)
print("%.0f" % (n/(time.time()-t)/1e6))'

best() { # backend url: best of three MB/s
  local b=$1 url=$2 m=0 v
  for _ in 1 2 3; do
    v=$(cd "$D/p" && "$W" run --backend "$b" -- python3 -c "$FETCH" "$url")
    [ "$v" -gt "$m" ] && m=$v
  done
  echo "$m"
}

{
  echo "## Throughput of one ${MIB} MiB download (MB/s, best of 3)"
  echo
  echo "| backend | through the proxy (rules) | direct (network: true) |"
  echo "|---|---|---|"
  for b in bwrap docker; do
    project "$RULES"; p=$(best "$b" "$URL_PROXY")
    project true; d=$(best "$b" "$URL_DIRECT")
    echo "| $b | $p | $d |"
  done
  echo
} | tee "$OUT/egress.md"

for b in bwrap docker; do
  args=()
  for net in false true rules; do
    if [ "$net" = rules ]; then n=$RULES; else n=$net; fi
    project "$n"
    cp "$D/p/workcell.yaml" "$D/p/$net.yaml"
    args+=(-n "$b network: $net" "$W run --config $D/p/$net.yaml --backend $b -- true")
  done
  hyperfine -N --warmup 2 --runs "$RUNS" --export-markdown "$OUT/egress-launch-$b.md" "${args[@]}" >/dev/null
  cat "$OUT/egress-launch-$b.md" | tee -a "$OUT/egress.md"
done
