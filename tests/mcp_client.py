"""Drives `workcell mcp` with the official MCP Python SDK (a client we did not write).

Usage: mcp_client.py WORKCELL_BIN PROJECT_DIR BACKEND
Prints one JSON object with what each step returned; the Rust test asserts on it.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main():
    bin_, project, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    params = StdioServerParameters(
        command=bin_,
        args=["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend, "--approve-all"],
        cwd=project,
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            r = await session.call_tool("list_files", {"path": "/"})
            out["list_root"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("read_file", {"path": "/data/hello.txt"})
            out["read"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("write_file", {"path": "/out/from-mcp.txt", "content": "written via MCP\n"})
            out["write"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("write_file", {"path": "/data/nope.txt", "content": "x"})
            out["write_ro"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("read_file", {"path": "/data/../../etc/passwd"})
            out["traversal"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("list_files", {"path": "/data", "pattern": "*.txt"})
            out["list_data"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("shell", {"command": "cat /data/hello.txt"})
            out["shell_cat"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("shell", {"command": "ls /root /home"})
            out["shell_outside"] = {"error": r.is_error, "text": text(r)}
            r = await session.call_tool("shell", {"command": "ls; echo 'unterminated"})
            out["shell_meta"] = {"error": r.is_error, "text": text(r)}
    print(json.dumps(out))


asyncio.run(main())
