"""Per-call latency of a `true` shell call through `workcell mcp`, for benches/checkout-size.sh
(issue 38): one server per backend on PROJECT, started once, called in turn.

A call is `call_tool("shell", {"command": "true"})` through the official MCP Python SDK; the
backends' calls are interleaved call by call, so that a shared machine's drift hits each alike.
Every call must succeed (exit status 0), else the script fails: a refused call is not a fast one.

Usage: checkout_size.py WORKCELL PROJECT [CALLS] [WARMUP]   (BACKENDS, default "bwrap docker")
Needs: the `mcp` SDK importable (no llm-sandbox). Prints one line per backend, milliseconds:
  BACKEND p50 p90 mean min max
"""
import asyncio
import contextlib
import os
import statistics
import sys
import time

# benches/mcp_shell.py (this script's folder is on sys.path): the same client and percentile.
from mcp_shell import open_mcp, pct


async def main():
    workcell, project = sys.argv[1], sys.argv[2]
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    warmup = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    backends = os.environ.get("BACKENDS", "bwrap docker").split()

    # Everything opened is closed again (last first) however the run ends, Ctrl-C included.
    async with contextlib.AsyncExitStack() as stack:
        methods = {b: await open_mcp(stack, workcell, project, b) for b in backends}
        times = {b: [] for b in methods}
        for i in range(warmup + calls):
            # Rotate the order each round so no backend always follows the other.
            k = i % len(backends)
            for b in backends[k:] + backends[:k]:
                t0 = time.perf_counter()
                await methods[b]()
                if i >= warmup:
                    times[b].append((time.perf_counter() - t0) * 1e3)

    for b, t in times.items():
        print(f"{b} {pct(t, 50):.1f} {pct(t, 90):.1f} {statistics.mean(t):.1f} {min(t):.1f} {max(t):.1f}")


asyncio.run(main())
