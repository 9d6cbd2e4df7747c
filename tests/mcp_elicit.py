"""Drives `workcell mcp` with the official MCP Python SDK as a client that answers approvals
through elicitation, as Claude Desktop, Claude Code or VS Code do with a person.

Usage: mcp_elicit.py WORKCELL_BIN PROJECT_DIR BACKEND EXTRA_ARGS_JSON ANSWERS_JSON CALLS_JSON
EXTRA_ARGS_JSON: more arguments for `workcell mcp` (["--no-elicit"], ["--approve", "shell"]).
ANSWERS_JSON: null for a client without the elicitation capability, else the answers to give
in order: "allow_once", "allow_for_session", "deny" (an accepted form with that value),
"decline", "cancel", "bogus" (an accepted form with a value not offered), or "error" (the
callback answers with a JSON-RPC error).
CALLS_JSON: a list of [tool, arguments].
Prints {"tools": [...], "calls": [{"error", "text"}], "asked": [{"message", "schema"}]}.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main():
    bin_, project, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    extra, answers, calls = json.loads(sys.argv[4]), json.loads(sys.argv[5]), json.loads(sys.argv[6])
    params = StdioServerParameters(
        command=bin_,
        args=["--config", f"{project}/workcell.yaml", "mcp", "--backend", backend] + extra,
        cwd=project,
    )
    asked = []

    async def elicit(context, p):
        asked.append({"message": p.message, "schema": p.requested_schema})
        answer = answers[len(asked) - 1] if len(asked) <= len(answers) else "cancel"
        if answer == "decline":
            return types.ElicitResult(action="decline")
        if answer == "cancel":
            return types.ElicitResult(action="cancel")
        if answer == "error":
            return types.ErrorData(code=types.INVALID_REQUEST, message="the client failed")
        if answer == "bogus":
            return types.ElicitResult(action="accept", content={"answer": "yes please"})
        return types.ElicitResult(action="accept", content={"answer": answer})

    out = {"calls": [], "asked": asked}
    kwargs = {} if answers is None else {"elicitation_callback": elicit}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, **kwargs) as session:
            await session.initialize()
            tools = await session.list_tools()
            out["tools"] = [t.name for t in tools.tools]
            for tool, arguments in calls:
                r = await session.call_tool(tool, arguments)
                out["calls"].append({"error": r.is_error, "text": text(r)})
    print(json.dumps(out))


asyncio.run(main())
