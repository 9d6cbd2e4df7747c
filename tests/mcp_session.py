"""Drives `workcell mcp` with the official MCP Python SDK to see one sandbox per session.

Usage: mcp_session.py WORKCELL_BIN PROJECT_DIR BACKEND MODE [EXTRA_ARG...]

MODE reuse: 20 shell calls report the sandbox's run id; /tmp and the working directory
            keep files between calls; a process a call leaves in the background does not
            outlive it; a timeout kills the call, not the session. Prints one JSON object.
MODE named: three calls' run ids and a file in /tmp between two calls (a named image);
            `ps` after a call that timed out.
MODE survivor: a call leaves a daemon behind that no process group holds (double fork,
            setsid, its main thread gone with the raw exit system call while a thread runs
            on: the leader shows Z); a later call's environment and stdout must be out of its
            reach; a call whose daemon holds its stdout, and one that stops the agent, must
            not keep later calls from answering. Prints one JSON object.
MODE hold:  one call (the session's sandbox then exists), prints {"run_id": ...} and a
            newline, then waits for ever: the Rust test kills this client or the server.
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


PROBE = r"""
import json, os, socket
res = {}
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/workcell-agent/agent.sock")
    res["connect"] = "connected"
except OSError as e:
    res["connect"] = str(e)
agents = []
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[1:2] == [b"__agent"]:
            agents.append(p)
    except OSError:
        pass
res["agents"] = len(agents)
for p in agents:
    for what, path in (("fd", "/proc/%s/fd/3" % p), ("environ", "/proc/%s/environ" % p), ("mem", "/proc/%s/mem" % p)):
        try:
            open(path, "rb").read(1)
            res[what] = "opened"
        except OSError as e:
            res[what] = str(e)
print(json.dumps(res))
"""


# The daemon of MODE survivor: it looks for processes of later calls, copies a SECRET_TOKEN
# from their environment into /out/leaked and writes into their stdout.
ATTACK = r"""
import ctypes, os, platform, sys, threading, time
SYS_EXIT = {"x86_64": 60, "aarch64": 93}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)

def spy():
    seen = set()
    while True:
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid() or p in seen:
                continue
            try:
                env = open("/proc/%s/environ" % p, "rb").read()
            except OSError:
                continue
            for var in env.split(b"\0"):
                if var.startswith(b"SECRET_TOKEN="):
                    seen.add(p)
                    with open("/out/leaked", "ab") as f:
                        f.write(var + b"\n")
                    try:
                        fd = os.open("/proc/%s/fd/1" % p, os.O_WRONLY)
                        os.write(fd, b"INJECTED-BY-SURVIVOR\n")
                        os.close(fd)
                    except OSError:
                        pass
        time.sleep(0.01)

child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        threading.Thread(target=spy).start()
        # The main thread leaves; the thread group lives on behind a zombie leader.
        libc.syscall(SYS_EXIT, 0)
    os._exit(0)
os.waitpid(child, 0)
time.sleep(0.5)
print("daemon started")
"""

# Processes in the sandbox with a live thread, but this one, its shell, the agent and the
# sandbox's init (a zombie leader's cmdline is empty: its threads are what count).
LIST = r"""
import os
me, left = os.getpid(), []
for p in os.listdir("/proc"):
    try:
        if not p.isdigit() or int(p) in (1, me, os.getppid()) or b"__agent" in open("/proc/%s/cmdline" % p, "rb").read():
            continue
        tasks = os.listdir("/proc/%s/task" % p)
        if any(open("/proc/%s/task/%s/stat" % (p, t)).read().rsplit(")", 1)[1].split()[0] not in "ZX" for t in tasks):
            left.append(p)
    except OSError:
        pass
print(len(left))
"""


def result(r):
    s = r.structured_content or {}
    return {"error": bool(r.is_error), "text": "".join(getattr(c, "text", "") for c in r.content),
            "exit_code": s.get("exit_code"), "stdout": s.get("stdout", ""), "stderr": s.get("stderr", ""),
            "timed_out": s.get("timed_out")}


async def main():
    bin_, project, backend, mode, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    params = StdioServerParameters(
        command=bin_,
        args=["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend] + extra,
        cwd=project,
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def sh(command, **kw):
                return result(await session.call_tool("shell", {"command": command, **kw}))

            if mode == "survivor":
                out = {}

                async def bounded(command, within, **kw):
                    # A call that does not answer within `within` seconds is reported as hung;
                    # the session cannot be used after it.
                    started = asyncio.get_running_loop().time()
                    try:
                        r = await asyncio.wait_for(sh(command, **kw), within)
                    except asyncio.TimeoutError:
                        r = {"hung": True}
                    r["seconds"] = round(asyncio.get_running_loop().time() - started, 1)
                    return r

                def done():
                    print(json.dumps(out), flush=True)
                    os._exit(0)

                await session.call_tool("write_file", {"path": "/out/attack.py", "content": ATTACK})
                await session.call_tool("write_file", {"path": "/out/list.py", "content": LIST})
                # Its output elsewhere: the call ends at once even on a system that misses it.
                out["spawn"] = await bounded("python3 /out/attack.py >/dev/null 2>&1", 60, timeout=10)
                out["victim"] = await bounded("sleep 2; echo clean", 60, env={"SECRET_TOKEN": "s3cret-36"})
                out["left"] = await bounded("python3 /out/list.py", 60)
                if any(out[k].get("hung") for k in out):
                    done()
                # Its output held by the daemon.
                out["holder"] = await bounded("python3 /out/attack.py", 60, timeout=5)
                out["after_holder"] = await bounded("printenv WORKCELL_RUN_ID", 60)
                if out["after_holder"].get("hung"):
                    done()
                # A call that stops the agent: that call is lost, the next gets an answer.
                out["stop_agent"] = await bounded("pkill -STOP -f __agent", 60, timeout=2)
                out["after_stop"] = await bounded("printenv WORKCELL_RUN_ID", 60)
                done()
            if mode == "hold":
                r = await sh("printenv WORKCELL_RUN_ID")
                print(json.dumps({"run_id": r["stdout"].strip(), "call": r}), flush=True)
                await asyncio.sleep(3600)
                return
            if mode == "named":
                # Debian's static busybox has no printenv applet: `env`, and the line read here.
                envs = [(await sh("env"))["stdout"] for _ in range(3)]
                out = {"ids": [next((l.split("=", 1)[1] for l in e.splitlines() if l.startswith("WORKCELL_RUN_ID=")), "") for e in envs]}
                out["touch"] = await sh("touch /tmp/kept")
                out["ls"] = await sh("ls /tmp/kept")
                out["stdin"] = await sh("touch /tmp/from-stdin", stdin="x\n")
                # A command past its timeout is killed in the container, not only left.
                out["timeout"] = await sh("sleep 1000", timeout=1)
                out["ps"] = await sh("ps")
                print(json.dumps(out))
                return
            out = {"ids": []}
            for _ in range(20):
                out["ids"].append((await sh("printenv WORKCELL_RUN_ID"))["stdout"].strip())
            out["touch_tmp"] = await sh("touch /tmp/kept")
            out["ls_tmp"] = await sh("ls /tmp/kept")
            out["touch_work"] = await sh("touch kept-in-workdir")
            out["ls_work"] = await sh("ls kept-in-workdir")
            # A daemon started by one call (its own session, so not in the call's process group).
            out["daemon"] = await sh("setsid -f sleep 1000")
            out["procs"] = await sh("python3 -c \"print(sorted(open('/proc/'+p+'/comm').read().strip() for p in __import__('os').listdir('/proc') if p.isdigit()))\"")
            out["timeout"] = await sh("sleep 30", timeout=1)
            out["after_timeout"] = await sh("printenv WORKCELL_RUN_ID")
            out["stdin"] = await sh("cat", stdin="given on stdin\n")
            out["env_cwd"] = await sh("printenv GREETING", env={"GREETING": "hi"}, cwd="/tmp")
            out["pwd_tmp"] = await sh("pwd", cwd="/tmp")
            # The worker's commands try to reach the agent: its socket, its descriptors.
            await session.call_tool("write_file", {"path": "/out/probe.py", "content": PROBE})
            out["probe"] = await sh("python3 /out/probe.py")
            # A command that kills the agent ends its sandbox; the next call gets a new one.
            out["kill_agent"] = await sh("pkill -KILL -f __agent")
            out["after_kill"] = await sh("printenv WORKCELL_RUN_ID")
            print(json.dumps(out))


asyncio.run(main())
