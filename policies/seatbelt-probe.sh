#!/bin/sh
# Checks a rendered Seatbelt profile from inside it, on a Mac. Run as the README says
# ("Checking the Seatbelt profile on a Mac"): under `sandbox-exec -f` with the profile that
# `workcell plan --backend seatbelt` prints for a root-form project whose directory is
# writable, with P (the project, `pwd -P`), REALHOME (your home) and NET (0 or 1) set.
# Prints one line per check; WRONG lines are findings. Exit status: the number of them.

[ "$(uname)" = Darwin ] || { echo "seatbelt-probe.sh: run this on macOS, under sandbox-exec (see the README)" >&2; exit 2; }
: "${P:?set P to the project directory (pwd -P)}" "${REALHOME:?set REALHOME to your home}"
NET=${NET:-0}
fails=0
check() {
    want=$1 desc=$2
    shift 2
    if (eval "$*") >/dev/null 2>&1; then got=allowed; else got=denied; fi
    if [ "$got" = "$want" ]; then
        echo "ok     $desc ($got)"
    else
        echo "WRONG  $desc: $got, expected $want"
        fails=$((fails + 1))
    fi
}
info() {
    desc=$1
    shift
    if (eval "$*") >/dev/null 2>&1; then echo "info   $desc: allowed"; else echo "info   $desc: denied"; fi
}

# Zones and control files
check allowed "write a file in the project" 'echo x > "$P/probe-out.txt" && rm "$P/probe-out.txt"'
check allowed "read the config" 'cat "$P/workcell.yaml"'
check denied "append to workcell.yaml" 'echo x >> "$P/workcell.yaml"'
check denied "replace workcell.yaml by rename" 'echo x > "$P/probe-new" ; mv "$P/probe-new" "$P/workcell.yaml"'
check denied "create a file in workers/" 'echo x > "$P/workers/probe.worker"'
check denied "rename workers/" 'mv "$P/workers" "$P/probe-workers"'
check denied "create a file in .workcell/" 'echo x > "$P/.workcell/probe"'
check denied "rename the project directory" 'mv "$P" "$P-probe"'
rm -f "$P/probe-new" 2>/dev/null
info "hard link to workcell.yaml (if allowed, writes through the link are a gap)" 'ln "$P/workcell.yaml" "$P/probe-link" && rm "$P/probe-link"'

# The rest of the host
check denied "list your home" 'ls "$REALHOME"'
check denied "read ~/.ssh" 'ls "$REALHOME/.ssh"'
check denied "write in your home" 'echo x > "$REALHOME/workcell-probe"'
check denied "list /usr/local" 'ls /usr/local'
check denied "list /System/Volumes/Data" 'ls /System/Volumes/Data'
check allowed "run /bin/ls" '/bin/ls /'
check allowed "write in HOME (the run's temp dir)" 'echo x > "$HOME/probe" && rm "$HOME/probe"'
check allowed "make a temp file in TMPDIR" 'f=$(mktemp) && rm "$f"'

# Processes and terminals
check allowed "read hw.ncpu" 'sysctl -n hw.ncpu'
check denied "read your shell's environment (ps -E on the parent)" 'ps -E -o command= -p $PPID | grep .'
check denied "open another terminal (/dev/ttys000)" 'test -c /dev/ttys000 && printf "" > /dev/ttys000'
check allowed "open a new pty (script)" 'script -q /dev/null /usr/bin/true < /dev/null'

# Network
check denied "connect to the Docker socket, if any" 'test -S /var/run/docker.sock && nc -U /var/run/docker.sock < /dev/null'
check denied "connect to syslog's Unix socket" 'nc -U /private/var/run/syslog < /dev/null'
check denied "listen on every address" 'nc -l 0.0.0.0 47653 & pid=$!; sleep 1; kill -0 $pid && kill $pid'
if [ "$NET" = 1 ]; then
    check allowed "fetch https://example.com" 'curl -sS -m 10 -o /dev/null https://example.com'
    check allowed "listen on loopback" 'nc -l 127.0.0.1 47654 & pid=$!; sleep 1; kill -0 $pid && kill $pid'
else
    check denied "fetch https://example.com" 'curl -sS -m 10 -o /dev/null https://example.com'
    check denied "listen on loopback" 'nc -l 127.0.0.1 47654 & pid=$!; sleep 1; kill -0 $pid && kill $pid'
fi
echo "$fails unexpected result(s)"
exit "$fails"
