"""The pseudo-terminal loop shared by tests/pty_run.py and tests/pty_review.py: runs a
command on a pseudo-terminal, types an answer and a newline at each prompt it shows, and
reaps it (killed after 120 s). Each script keeps what it matches and what it answers.
"""
import os
import pty
import select
import time


def drive(argv, prompt, answer, setup=None, feed=None):
    """Runs `argv` on a pseudo-terminal. `prompt` (a compiled bytes regex) is searched in the
    output after the last prompt answered; at each match `answer()` gives the text typed
    (a newline follows). `setup(fd)` runs once the command started, `feed(chunk)` on every
    chunk read. Returns (exit code, all output bytes)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    if setup is not None:
        setup(fd)

    out = b""
    reaped = None
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
            if feed is not None:
                feed(chunk)
        m = prompt.search(out, answered_upto)
        if m:
            answered_upto = m.end()
            os.write(fd, answer().encode() + b"\n")
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
    return os.waitstatus_to_exitcode(reaped), out
