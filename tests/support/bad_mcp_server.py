"""MCP servers that misbehave the way real ones do, for tests: `python tests/support/bad_mcp_server.py MODE`.

- hang: reads every request and never answers (a server stuck before its handshake).
- garbage: answers every request with a line that is not JSON-RPC.
"""

from __future__ import annotations

import sys


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        if mode == "garbage" and line.strip():
            sys.stdout.write("Starting up... this is not JSON-RPC\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
