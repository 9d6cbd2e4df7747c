"""Drives `workcell mcp` with the official MCP Python SDK to see one sandbox per session.

Usage: mcp_session.py WORKCELL_BIN PROJECT_DIR BACKEND MODE [EXTRA_ARG...]

MODE reuse: 20 shell calls report the sandbox's run id; /tmp and the working directory
            keep files between calls; a process a call leaves in the background does not
            outlive it; a timeout kills the call, not the session. Prints one JSON object.
MODE named: three calls' run ids and a file in /tmp between two calls (a named image).
MODE hold:  one call (the session's sandbox then exists), prints {"run_id": ...} and a
            newline, then waits for ever: the Rust test kills this client or the server.
"""
import asyncio
import json
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
