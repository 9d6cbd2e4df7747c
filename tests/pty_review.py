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
import re
import struct
import sys
import termios

import pyte

# The loop itself is tests/support/pty_drive.py (shared with pty_run.py); no bytecode is
# left in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from pty_drive import drive  # noqa: E402

COLS, ROWS = 100, 30
answers, argv = json.loads(sys.argv[1]), sys.argv[2:]
screen = pyte.Screen(COLS, ROWS)
stream = pyte.ByteStream(screen)
prompt = re.compile(rb"workcell: [^\n]*?\? \[y\]es[^\n]*?: ")
screens = []


def setup(fd):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    if os.environ.get("PTY_TYPEAHEAD"):
        os.write(fd, os.environ["PTY_TYPEAHEAD"].encode())


def answered():
    screens.append([line.rstrip() for line in screen.display])
    return answers[len(screens) - 1] if len(screens) <= len(answers) else "n"


code, out = drive(argv, prompt, answered, setup=setup, feed=stream.feed)
print(json.dumps({"exit": code, "output": out.decode("utf-8", "replace"), "prompts": len(screens), "screens": screens}))
