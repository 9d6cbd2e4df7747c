#!/usr/bin/env bash
# Times `workcell check --stdin` (release build) on a large path list with hyperfine, side
# by side with the Python reference (pydantic-ai-filesystem-sandbox's `can_read`,
# benches/check_stdin_ref.py) and, when BEFORE names one, an older workcell binary.
#
#   bash benches/check-stdin.sh [N_PATHS]     (default 100000)
#   BEFORE=/tmp/workcell-old RUNS=5 WARMUP=1 bash benches/check-stdin.sh 200000
#
# Builds a project of 3 zones (~5k files, depth 6) in a temporary directory, generates
# N_PATHS mixed paths (about 60% existing files, 15% missing files inside zones, 25% refusals:
# `..` escapes, unknown zones, `~`, drive letters, read-only zones with --write) and runs
# hyperfine over read checks (reference, before, now), write checks and --json output.
# The binary is $WORKCELL_BIN, else target/release/workcell (under $CARGO_TARGET_DIR if set).
set -euo pipefail

N="${1:-100000}"
RUNS="${RUNS:-10}"
WARMUP="${WARMUP:-2}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${WORKCELL_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/workcell}"
REF="$ROOT/benches/check_stdin_ref.py"
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 2; }
python3 -c 'import pydantic_ai_filesystem_sandbox' 2>/dev/null || { echo "the reference needs: pip install pydantic-ai-filesystem-sandbox" >&2; exit 2; }
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release --bin workcell)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
printf 'sandbox:\n  zones:\n    src: {path: ./src, mode: ro}\n    docs: {path: ./docs, mode: ro, suffixes: [.txt, .md]}\n    out: {path: ./out, mode: rw}\n' > workcell.yaml

python3 - "$N" <<'PY'
import os, random, sys
n = int(sys.argv[1])
random.seed(42)
files = []
for zone in ("src", "docs", "out"):
    for a in range(4):
        for b in range(4):
            for c in range(3):
                d = f"{zone}/a{a}/b{b}/c{c}/d/e"
                os.makedirs(d, exist_ok=True)
                for f in range(35):
                    p = f"{d}/file{f}.txt"
                    open(p, "w").write("x")
                    files.append(p)
refusals = ["/src/../../etc/passwd", "/nope/x.txt", "~/.ssh/id_rsa", "C:\\Windows\\x", "/src/a0/../../out/x",
            "../outside", "/docs/a0/b0/c0/d/e/x.pdf", "/", "/src/a1/b1/../../../../x"]
with open("paths.txt", "w") as out:
    for i in range(n):
        r = random.random()
        if r < 0.60:
            p = random.choice(files)
            out.write(random.choice(["/", "", ""]) + p if not p.startswith("/") else p)
            out.write("\n")
        elif r < 0.75:
            out.write("/" + random.choice(files) + ".new/y.txt\n")
        else:
            out.write(random.choice(refusals) + "\n")
print(f"{len(files)} files, {n} paths", file=sys.stderr)
PY

# Same verdict count from each: a reference that skipped lines would not be comparable.
for cmd in "python3 $REF" "$BIN check --stdin" ${BEFORE:+"$BEFORE check --stdin"}; do
  lines=$($cmd < paths.txt | wc -l) || true
  echo "$cmd: $lines verdicts" >&2
done
# The same verdicts, byte for byte, as the older binary's.
if [ -n "${BEFORE:-}" ]; then
  for flags in "" "--write" "--json"; do
    if ! cmp <("$BEFORE" check --stdin $flags < paths.txt) <("$BIN" check --stdin $flags < paths.txt); then
      echo "check --stdin $flags: the output differs from $BEFORE's" >&2
      exit 1
    fi
    echo "check --stdin $flags: same output as $BEFORE" >&2
  done
fi

# `check` exits 1 when any path is refused, which is expected here: -i ignores it.
ARGS=(--command-name "python reference can_read ($N paths)" "python3 $REF < paths.txt > /dev/null")
[ -n "${BEFORE:-}" ] && ARGS+=(--command-name "before: check --stdin ($N paths)" "$BEFORE check --stdin < paths.txt > /dev/null")
ARGS+=(
  --command-name "check --stdin ($N paths)" "$BIN check --stdin < paths.txt > /dev/null"
  --command-name "check --stdin --write ($N paths)" "$BIN check --stdin --write < paths.txt > /dev/null"
  --command-name "check --stdin --json ($N paths)" "$BIN check --stdin --json < paths.txt > /dev/null"
)
hyperfine --warmup "$WARMUP" --runs "$RUNS" -i "${ARGS[@]}" --export-markdown "$WORK/results.md"
cat "$WORK/results.md"
