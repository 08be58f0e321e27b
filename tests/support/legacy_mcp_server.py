"""A handshake-era MCP server (protocol 2025-11-25), raw JSON-RPC over stdio, for tests:
`python tests/support/legacy_mcp_server.py`.

It has no `server/discover` (the client falls back to `initialize`), answers `ping`, and has one tool,
`ask_model(question)`, that asks the client for a model completion (`sampling/createMessage`) and
returns what came back, or the refusal, and `export`, which it runs only as a task. Every ping is appended to `$MCP_LOG` as {"ping": pid}.
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
    send({"id": "sampling-1", "method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}], "maxTokens": 50}})
    while (message := read()) is not None:
        if message.get("id") == "sampling-1" and "method" not in message:
            if "error" in message:
                return f"sampling refused: {message['error']['message']}"
            return f"the model said: {message['result']['content']['text']}"
        answer(message)  # anything else meanwhile (a ping) is answered as usual
    return "the client went away"


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
        text = ask_model(message["params"]["arguments"]["question"])
        send({"id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
    else:
        send({"id": rid, "error": {"code": -32601, "message": "Method not found"}})


def main() -> None:
    while (message := read()) is not None:
        answer(message)


if __name__ == "__main__":
    main()
