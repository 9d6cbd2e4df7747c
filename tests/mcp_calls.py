"""Drives `workcell mcp` with the official MCP Python SDK through a list of tool calls.

Usage: mcp_calls.py LAUNCH_JSON PROJECT_DIR BACKEND CALLS_JSON
LAUNCH_JSON is the command that starts workcell (["/path/workcell"], or with a `setpriv`
prefix to run it as another user); CALLS_JSON a list of [tool, arguments]. Prints a JSON list
with {"error": bool, "text": str} per call, in order.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main():
    launch, project, backend, calls = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    params = StdioServerParameters(
        command=launch[0],
        args=launch[1:] + ["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend, "--approve-all"],
        cwd=project,
    )
    out = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for tool, arguments in calls:
                r = await session.call_tool(tool, arguments)
                out.append({"error": r.is_error, "text": text(r)})
    print(json.dumps(out))


asyncio.run(main())
