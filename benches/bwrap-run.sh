#!/usr/bin/env bash
# Launch overhead of `workcell run --backend bwrap` against the same sandbox started by
# raw bwrap (the command line `workcell plan --backend bwrap` prints).
#
# Usage: benches/bwrap-run.sh [WORKCELL_BINARY] [RUNS]
#   WORKCELL_BINARY  default: target/release/workcell (build with `cargo build --release`)
#   RUNS             default: 60 per command and mode
#
# Two modes, each with hyperfine -N in alternating blocks (raw, workcell, workcell, raw, ...)
# so that the drift of a shared machine hits both sides alike:
#   back-to-back  runs follow each other at once (hyperfine's usual way);
#   isolated      a 100 ms pause before every run, as when a person or an agent starts one
#                 command. This mode shows costs that back-to-back runs hide, such as the
#                 kernel's RCU grace period when a process is moved into a cgroup (which a
#                 run that follows within a few milliseconds does not wait for again).
set -euo pipefail

workcell=$(realpath "${1:-target/release/workcell}")
runs=${2:-60}
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 1; }

dir=$(mktemp -d)
chmod 755 "$dir"  # workers run as an unprivileged user when this runs as root
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/in" "$dir/out"
[ "$(id -u)" != 0 ] || chown 65534:65534 "$dir/out"  # as root the worker is nobody
cd "$dir"
# The project's zones; `plan` renders the sandbox `run` starts.
cat > workcell.yaml <<'YAML'
sandbox:
  zones:
    in: {path: ./in, mode: ro}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
YAML

raw=$("$workcell" plan --backend bwrap -- true | sed -n 2p)
echo "raw bwrap command: $raw"
"$workcell" plan --backend bwrap -- true | grep '^# limits' || true
python3 - "$runs" "$raw" "$workcell" <<'PY'
import json, shlex, statistics, subprocess, sys, tempfile
runs, raw, wc = int(sys.argv[1]), sys.argv[2], shlex.quote(sys.argv[3])
cmd = "-- true"  # in the project, with its zones
cmds = {
    "raw bwrap": raw,
    # The raw line has no broker mount, so `--no-broker` is the like-for-like comparison;
    # the default run (with the broker) shows what the broker costs on top.
    "workcell --no-broker": f"{wc} run --backend bwrap --no-broker {cmd}",
    "workcell (broker)": f"{wc} run --backend bwrap {cmd}",
}
blocks = 6
per = max(runs // blocks, 2)
for mode, extra in [("back-to-back", ["--warmup", "3"]), ("isolated", ["--prepare", "sleep 0.1"])]:
    times = {n: [] for n in cmds}
    for b in range(blocks):
        for name in (list(cmds) if b % 2 == 0 else list(cmds)[::-1]):
            out = tempfile.NamedTemporaryFile(suffix=".json")
            subprocess.run(["hyperfine", "-N", "--runs", str(per), *extra, "--export-json", out.name, cmds[name]], check=True, capture_output=True)
            times[name] += [t * 1e3 for t in json.load(open(out.name))["results"][0]["times"]]
    base = statistics.median(times["raw bwrap"])
    print(f"{mode} ({len(times['raw bwrap'])} runs each):")
    for name, t in times.items():
        m = statistics.median(t)
        print(f"  {name:22s} median {m:6.2f} ms  mean {statistics.mean(t):6.2f} ms  ratio (median) {m / base:.2f}x")
PY
