"""Runs a command on a pseudo-terminal and answers workcell's approval prompts.

Usage: pty_run.py ANSWER CMD ARGS...
Every time the output shows a prompt ("workcell: allow ... [n]o: ", or a delivery review's
"workcell: publish ... [v]iew NAME: "), ANSWER and a newline are
typed. Prints one JSON object: {"exit": status, "output": everything the terminal showed,
"prompts": how many prompts were answered}.
"""
import json
import os
import re
import sys

# The loop itself is tests/support/pty_drive.py (shared with pty_review.py); no bytecode is
# left in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from pty_drive import drive  # noqa: E402

answer, argv = sys.argv[1], sys.argv[2:]
prompt = re.compile(rb"workcell: allow .*?\[n\]o: |workcell: (?:publish|delete) [^\n]*?\[v\]iew NAME: ", re.S)
prompts = 0


def answered():
    global prompts
    prompts += 1
    return answer


code, out = drive(argv, prompt, answered)
print(json.dumps({"exit": code, "output": out.decode("utf-8", "replace"), "prompts": prompts}))
