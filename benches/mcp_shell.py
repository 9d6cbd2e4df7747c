"""Per-call latency of a `true` shell call, side by side in one run (issue 26).

Measured, interleaved call by call so that a shared machine's drift hits every method alike:
  workcell mcp --backend B   the `shell` tool through the official MCP Python SDK (one server
                             per backend, started once; a call is `call_tool("shell", true)`);
  llm-sandbox                `SandboxSession.execute_command("true")` in its session container
                             (Docker Engine API exec through docker-py);
  docker exec                the `docker exec CONTAINER true` CLI into a running container.
llm-sandbox and `docker exec` use the same local image (IMAGE, built by benches/mcp-shell.sh).

Usage: mcp_shell.py WORKCELL PROJECT IMAGE [CALLS] [WARMUP]
Needs: the `mcp` SDK and `llm-sandbox[docker]` (0.3.46) importable. Prints a markdown table.
Every call must succeed (exit status 0), else the script fails: a refused call is not a fast one.
Nothing here talks to anything but the local Docker daemon and the local workcell.
"""
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# The label benches/mcp-shell.sh removes containers by, whatever way this script ends.
LABEL = {"dev.workcell.bench": "mcp-shell"}


def pct(times, p):
    """Nearest-rank percentile (no interpolation: with 100 calls, p95 is the 95th slowest)."""
    s = sorted(times)
    return s[max(0, -(-len(s) * p // 100) - 1)]


async def open_mcp(stack, workcell, project, backend):
    """A `workcell mcp --backend BACKEND` server on PROJECT, opened in `stack`: returns a
    function doing one `shell` call of `true` (failing the script when the call fails)."""
    params = StdioServerParameters(
        command=workcell,
        args=["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend, "--approve-all"],
        cwd=project,
    )
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()

    async def call():
        r = await session.call_tool("shell", {"command": "true"})
        code = (r.structured_content or {}).get("exit_code", 0)
        if r.is_error or code != 0:
            text = "".join(getattr(c, "text", "") for c in r.content)
            raise SystemExit(f"workcell {backend}: the shell call failed: {text}")

    return call


async def main():
    workcell, project, image = sys.argv[1], sys.argv[2], sys.argv[3]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    backends = os.environ.get("BACKENDS", "docker bwrap").split()

    from llm_sandbox import SandboxSession

    methods = {}  # name -> async function doing one call

    # Everything opened is closed again (last first) however the run ends, Ctrl-C included.
    async with contextlib.AsyncExitStack() as stack:
        for b in backends:
            methods[f"workcell mcp, {b} backend"] = await open_mcp(stack, workcell, project, b)

        # llm-sandbox: its own session container, created from the local image (never
        # pulled), without its language set-up (no venv/pip: the image has no Python).
        llm = SandboxSession(lang="python", image=image, skip_environment_setup=True, keep_template=True, runtime_configs={"labels": LABEL})
        llm.open()
        stack.callback(llm.close)

        async def llm_call():
            out = llm.execute_command("true")
            if out.exit_code != 0:
                raise SystemExit(f"llm-sandbox: exit {out.exit_code}: {out.stderr}")

        methods["llm-sandbox 0.3.46 session exec"] = llm_call

        label = [a for k, v in LABEL.items() for a in ("--label", f"{k}={v}")]
        cid = subprocess.run(["docker", "run", "-d", "--rm", *label, image], check=True, capture_output=True, text=True).stdout.strip()
        stack.callback(subprocess.run, ["docker", "rm", "-f", cid], capture_output=True)

        async def docker_exec():
            subprocess.run(["docker", "exec", cid, "true"], check=True)

        methods["`docker exec` CLI"] = docker_exec

        times = {n: [] for n in methods}
        for i in range(warmup + calls):
            # Rotate the order each round so no method always follows another.
            names = list(methods)
            k = i % len(names)
            for name in names[k:] + names[:k]:
                t0 = time.perf_counter()
                await methods[name]()
                if i >= warmup:
                    times[name].append((time.perf_counter() - t0) * 1e3)

    print(f"\n{calls} calls of `true` each (after {warmup} warm-up), interleaved; milliseconds\n")
    print("| per shell call (`true`) | p50 | p95 | mean | min | max |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, t in times.items():
        print(f"| {name} | {pct(t, 50):.1f} | {pct(t, 95):.1f} | {statistics.mean(t):.1f} | {min(t):.1f} | {max(t):.1f} |")


if __name__ == "__main__":  # benches/checkout_size.py imports its client
    asyncio.run(main())
