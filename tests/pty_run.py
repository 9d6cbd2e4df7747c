"""Runs a command on a pseudo-terminal and answers workcell's approval prompts.

Usage: pty_run.py ANSWER CMD ARGS...
Every time the output shows a prompt ("workcell: allow ... [n]o: ", or a delivery review's
"workcell: publish ... [v]iew NAME: "), ANSWER and a newline are
typed. Prints one JSON object: {"exit": status, "output": everything the terminal showed,
"prompts": how many prompts were answered}.
"""
import json
import os
import pty
import re
import select
import sys
import time

answer, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)

out = b""
reaped = None
prompts = 0
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
    pending = out[answered_upto:]
    m = re.search(rb"workcell: allow .*?\[n\]o: |workcell: (?:publish|delete) [^\n]*?\[v\]iew NAME: ", pending, re.S)
    if m:
        answered_upto += m.end()
        prompts += 1
        os.write(fd, answer.encode() + b"\n")
    # Reaped once only: a second waitpid on it raises ChildProcessError.
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
print(json.dumps({"exit": code, "output": out.decode("utf-8", "replace"), "prompts": prompts}))
