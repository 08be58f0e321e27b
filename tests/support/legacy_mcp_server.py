"""A handshake-era MCP server (protocol 2025-11-25), raw JSON-RPC over stdio, for tests:
`python tests/support/legacy_mcp_server.py`.

It has no `server/discover` (the client falls back to `initialize`), answers `ping`, and has one tool,
`ask_model(question)`, that asks the client for a model completion (`sampling/createMessage`) and
returns what came back, or the refusal; `ask_person(question)`, which asks the person through the
client (`elicitation/create`); `nag(times)`, which asks that many times in a row and returns each action;
and `export`, which it runs only as a task. Every ping is appended to `$MCP_LOG` as {"ping": pid}.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

VERSION = "2025-11-25"
TOOLS = [
    {"name": "ask_model", "description": "Asks the client's model a question (sampling).",
     "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}},
    {"name": "ask_person", "description": "Asks the person for input (elicitation).",
     "inputSchema": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}},
    {"name": "nag", "description": "Asks the person the same question `times` times in a row (elicitation).",
     "inputSchema": {"type": "object", "properties": {"times": {"type": "integer"}}, "required": ["times"]}},
    {"name": "export", "description": "Runs only as a task (task augmentation required).",
     "inputSchema": {"type": "object", "properties": {}}, "execution": {"taskSupport": "required"}},
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def read() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    return json.loads(line) if line else None


def ask_model(question: str) -> str:
    reply = request("sampling/createMessage", {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}], "maxTokens": 50})
    if "error" in reply:
        return f"sampling refused: {reply['error']['message']}"
    return f"the model said: {reply['result']['content']['text']}"


def ask_person(question: str) -> str:
    reply = request("elicitation/create", {"mode": "form", "message": question, "requestedSchema": {
        "type": "object", "properties": {"answer": {"type": "string"}}}})
    if "error" in reply:
        return f"elicitation refused: {reply['error']['message']}"
    return f"the person said: {reply['result']}"


def nag(times: int) -> str:
    actions = []
    for n in range(times):
        reply = request("elicitation/create", {"mode": "form", "message": f"Are we there yet? ({n + 1})",
                                               "requestedSchema": {"type": "object", "properties": {}}})
        actions.append(reply["result"]["action"] if "result" in reply else "error")
    return "nag: " + ",".join(actions)


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Ask the client, and wait for its reply (answering anything else meanwhile, such as a ping)."""
    send({"id": f"{method}-1", "method": method, "params": params})
    while (message := read()) is not None:
        if message.get("id") == f"{method}-1" and "method" not in message:
            return message
        answer(message)
    return {"error": {"message": "the client went away"}}


def answer(message: dict[str, Any]) -> None:
    method, rid = message.get("method"), message.get("id")
    if rid is None:
        return  # notifications (initialized, cancelled)
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": VERSION, "capabilities": {"tools": {}},
                                    "serverInfo": {"name": "legacy-test", "version": "1"}}})
    elif method == "ping":
        if os.environ.get("MCP_LOG"):
            with open(os.environ["MCP_LOG"], "a") as f:
                f.write(json.dumps({"ping": os.getpid()}) + "\n")
        send({"id": rid, "result": {}})
    elif method == "tools/list":
        send({"id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name, args = message["params"]["name"], message["params"]["arguments"]
        text = nag(args["times"]) if name == "nag" else (ask_person if name == "ask_person" else ask_model)(
            args["question"])
        send({"id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
    else:
        send({"id": rid, "error": {"code": -32601, "message": "Method not found"}})


def main() -> None:
    while (message := read()) is not None:
        answer(message)


if __name__ == "__main__":
    main()
