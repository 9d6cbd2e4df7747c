"""Runs a command on a 100x30 pseudo-terminal, answers its prompts in turn, and keeps what a
person would have seen on the screen at each prompt (the output goes through pyte, a
terminal emulator, so scrolling regions, cursor moves and clears count as on a real one).

Usage: pty_review.py ANSWERS_JSON CMD ARGS...
ANSWERS_JSON is a JSON list of answers, typed one per prompt ("workcell: ...? [y]es...: ");
once it is used up, "n" is typed. PTY_TYPEAHEAD, when set, is typed as soon as the command
starts (a person typing before any question was asked). Prints one JSON object: {"exit": status, "output": the raw
output, "prompts": how many prompts were answered, "screens": the screen's lines at each prompt}.
"""
import fcntl
import json
import os
import pty
import re
import select
import struct
import sys
import termios
import time

import pyte

COLS, ROWS = 100, 30
answers, argv = json.loads(sys.argv[1]), sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
if os.environ.get("PTY_TYPEAHEAD"):
    os.write(fd, os.environ["PTY_TYPEAHEAD"].encode())

screen = pyte.Screen(COLS, ROWS)
stream = pyte.ByteStream(screen)
prompt = re.compile(rb"workcell: [^\n]*?\? \[y\]es[^\n]*?: ")
out = b""
reaped = None
screens = []
answered_upto = 0
deadline = time.time() + 120
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        stream.feed(chunk)
    m = prompt.search(out, answered_upto)
    if m:
        answered_upto = m.end()
        screens.append([line.rstrip() for line in screen.display])
        answer = answers[len(screens) - 1] if len(screens) <= len(answers) else "n"
        os.write(fd, answer.encode() + b"\n")
    if reaped is None:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            reaped = status
    if reaped is not None and not r:
        break
else:
    os.kill(pid, 9)

if reaped is None:
    _, reaped = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(reaped)
print(json.dumps({"exit": code, "output": out.decode("utf-8", "replace"), "prompts": len(screens), "screens": screens}))
