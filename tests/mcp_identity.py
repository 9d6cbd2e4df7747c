"""Drives `workcell mcp` with the official MCP Python SDK for its protocol identity: server
info, the tool list as the client sees it (annotations, outputSchema), a shell call's
structured output validated against that schema, a base64 round trip and calls to tools
that are not listed.

Usage: mcp_identity.py WORKCELL_BIN PROJECT_DIR BACKEND [EXTRA_ARG...]
Prints one JSON object; the Rust test (tests/mcp_identity.rs) asserts on it.
"""
import asyncio
import base64
import json
import sys

import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def outcome(r):
    return {"error": bool(r.is_error), "text": text(r), "structured": r.structured_content}


async def main():
    bin_, project, backend, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    params = StdioServerParameters(
        command=bin_,
        args=["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend] + extra,
        cwd=project,
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = {"name": init.server_info.name, "version": init.server_info.version}
            tools = (await session.list_tools()).tools
            out["tools"] = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
            names = [t.name for t in tools]
            if "shell" in names:
                r = await session.call_tool("shell", {"command": "cat /data/hello.txt"})
                out["shell"] = outcome(r)
                schema = next(t.output_schema for t in tools if t.name == "shell")
                # Checked here too, not only by the SDK: an error names the failing field.
                try:
                    if schema is None:
                        raise jsonschema.ValidationError("shell declares no outputSchema")
                    jsonschema.validate(r.structured_content, schema)
                    out["shell"]["valid"] = True
                except jsonschema.ValidationError as e:
                    out["shell"]["valid"] = str(e)
            if "write_file" in names:
                data = bytes(range(256))
                r = await session.call_tool(
                    "write_file", {"path": "/out/bytes.bin", "content": base64.b64encode(data).decode(), "encoding": "base64"}
                )
                out["write_b64"] = outcome(r)
                r = await session.call_tool("write_file", {"path": "/out/bad.bin", "content": "not base64!", "encoding": "base64"})
                out["write_bad_b64"] = outcome(r)
            r = await session.call_tool("read_file", {"path": "/out/bytes.bin", "encoding": "base64"})
            res = outcome(r)
            if not r.is_error and "content" in json.loads(res["text"]):
                body = json.loads(res["text"])
                res["decoded"] = list(base64.b64decode(body["content"]))
                res["body"] = body
            out["read_b64"] = res
            r = await session.call_tool("read_file", {"path": "/out/bytes.bin", "encoding": "base64", "offset": 250, "max_chars": 4})
            out["read_b64_window"] = outcome(r)
            r = await session.call_tool("read_file", {"path": "/out/bytes.bin"})
            out["read_text"] = outcome(r)
            for tool in ["call_worker", "request_access", "no_such_tool"]:
                r = await session.call_tool(tool, {"name": "x", "path": "/tmp", "mode": "ro"})
                out["call_" + tool] = outcome(r)
    print(json.dumps(out))


asyncio.run(main())
