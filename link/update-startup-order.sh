#!/usr/bin/env bash
# Regenerates link/startup-order.txt: the functions a `workcell run` executes, in the order
# callgrind first meets them, which the release build hands to the linker
# (`--symbol-ordering-file`, see build.rs) so that they sit together in the binary.
# Without it, the few hundred functions a run needs are spread over 8 MB of code and the
# kernel takes one page fault per 64 KB window it touches (see BENCHMARKS.md, "bwrap launch").
#
# Usage: link/update-startup-order.sh   (needs valgrind and bubblewrap; builds the release binary)
# Run it after changes to the run path or a toolchain / dependency update; a stale list only
# costs speed (names that no longer exist are skipped by the linker).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/link/startup-order.txt"
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 1; }
cd "$root"
cargo build --release --bin workcell
bin="$root/target/release/workcell"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/in" "$dir/out"
cat > "$dir/workcell.yaml" <<'YAML'
sandbox:
  zones:
    in: {path: ./in, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
YAML

# The workloads, most important first: their functions come first in the list.
workloads=(
  "run --backend bwrap --no-broker -- true"
  "run --backend bwrap -- true"
  "run --backend bwrap --zone in=./in:ro -- true"
  "plan --backend bwrap -- true"
  "--version"
)
nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u > "$dir/defined"
: > "$dir/seen"
i=0
for w in "${workloads[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # the workload is a word list
  (cd "$dir" && valgrind --tool=callgrind --demangle=no --log-file="$dir/vg.$i.log" --callgrind-out-file="$dir/cg.$i" "$bin" $w >/dev/null)
  # callgrind numbers functions as it first records them: keep that order.
  grep -oE '^c?fn=\([0-9]+\) .+' "$dir/cg.$i" | sed -E 's/^c?fn=\(([0-9]+)\) /\1 /' | sort -n -s -k1,1 | cut -d' ' -f2- >> "$dir/seen"
done
# First occurrence wins; keep only this binary's own code. Some names end in `.llvm.<hash>`
# where the hash differs between checkouts of the same commit (about 60 of 800 did in CI);
# those just do not match there, and CI prints how many did.
awk 'NR == FNR { defined[$0] = 1; next } ($0 in defined) && !seen[$0]++' "$dir/defined" "$dir/seen" > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $(wc -l < "$out") symbols to $out"
