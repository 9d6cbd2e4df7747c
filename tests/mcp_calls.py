"""Calls tools of `workcell mcp` through the official MCP Python SDK (a client we did not write).

Usage: mcp_calls.py WORKCELL_BIN PROJECT_DIR BACKEND < CALLS
CALLS is a JSON list of [tool, arguments]; prints a JSON list of {"error", "text"}, one per call.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    bin_, project, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    calls = json.load(sys.stdin)
    params = StdioServerParameters(
        command=bin_,
        args=["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend, "--approve-all"],
        cwd=project,
    )
    out = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for tool, args in calls:
                r = await session.call_tool(tool, args)
                out.append({"error": r.is_error, "text": "".join(getattr(c, "text", "") for c in r.content)})
    print(json.dumps(out))


asyncio.run(main())
