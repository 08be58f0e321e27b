#!/usr/bin/env python3
"""What a Mattermost message in a burst costs on the wire, and the daemon's CPU against a control.

Per message of a burst of new conversations (the daemon as `bench/platforms.py` runs it, on the
Mattermost fake): the REST calls the fake answered, by route; the websocket frames each way (the
events the server sent the bot: the person's post, the echo of each of the bot's own posts and
edits; the bot's actions, each answered with a `seq_reply` frame); the TCP connections the daemon
held to the fake and how many it opened during the burst (its sockets to the fake's port in
/proc/net/tcp, TIME_WAIT included, so one opened and closed within the burst still counts).

Beside them, the daemon's CPU per message (its own /proc/<pid>/stat: the fake runs in this
process and is not in it) and the model server's CPU per message over the same burst. The model
server does the same work for every completion, so its CPU per message is a control: when it moves
between bursts, the machine did (other work on the shared cores slows every process alike), and
"daemon / model server" is the daemon's figure with that drift divided out. Compare it between
checkouts on this platform, not with another platform's: the model server's own cost per completion
moves with how the requests arrive (bench/README.md, Round 16).

    .venv/bin/python bench/mattermost_wire.py                    # 3 bursts of 200
    .venv/bin/python bench/mattermost_wire.py --gateway-src /tmp/old-checkout --burst 300
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import statistics
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.platforms import Mattermost, Proc, burst, poll, start_gateway, start_model_server  # noqa: E402
from bench.threads import thread_cpu  # noqa: E402

_ID = re.compile(r"/[a-z0-9]{26}(?=/|$)")  # a Mattermost id in a path: the route is what is counted


def route(method: str, path: str) -> str:
    return f"{method} {_ID.sub('/{id}', path)}"


def local_ports_to(port: int) -> set[int]:
    """The local ports of loopback TCP sockets whose remote end is `port`, in any state (/proc/net/tcp)."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote = line.split()[1:3]
        if int(remote.rsplit(":", 1)[1], 16) == port:
            ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def events_sent(p: Mattermost) -> int:
    """Events the fake has sent (or queued) on all its websocket connections: the bot's, here."""
    return sum(conn.seq_next for conn in p.fake._conns.values())


async def main(args: argparse.Namespace) -> int:
    p = Mattermost("gateway")
    await p.start()
    port = int(urlsplit(p.url).port or 0)
    stop = asyncio.Event()
    poller = asyncio.create_task(poll([p], stop))
    model, model_url, _ = await start_model_server()
    procs: list[Proc] = [model]
    rows: list[dict[str, float]] = []
    routes: collections.Counter[str] = collections.Counter()
    answered = 0
    try:
        with tempfile.TemporaryDirectory(prefix="gw-mm-wire-") as tmp:
            daemon = await start_gateway(Path(args.gateway_src).resolve(), Path(tmp), model_url, [p])
            procs.append(daemon)
            await burst(p, daemon, args.burst, args.budget)  # warm-up: the pools, the first run's imports
            for r in range(args.rounds):
                fake = p.fake
                calls0, typing0, events0 = len(fake.requests), len(fake.typing), events_sent(p)
                ports0 = local_ports_to(port)
                model0 = sum(thread_cpu(model.pid).values())  # ns: the daemon's ticks are too coarse for it
                b = await burst(p, daemon, args.burst, args.budget)  # its CPU: the daemon's alone
                model_ms = (sum(thread_cpu(model.pid).values()) - model0) / 1e6 / max(1, b.messages)
                opened = len(local_ports_to(port) - ports0)
                n = max(1, b.messages)
                got = collections.Counter(route(m, path) for m, path, _ in fake.requests[calls0:])
                routes.update(got)
                answered += b.messages
                actions = len(fake.typing) - typing0
                row = {"cpu": b.cpu_ms, "model": model_ms, "ratio": b.cpu_ms / model_ms if model_ms else float("nan"),
                       "rate": b.rate, "rest": sum(got.values()) / n, "events": (events_sent(p) - events0) / n,
                       "actions": actions / n, "opened": opened, "held": len(ports0)}
                rows.append(row)
                print(f"  burst {r + 1}: {b.messages} answered, {b.rate:.0f} msg/s, daemon {b.cpu_ms:.2f} ms CPU/msg, "
                      f"model server {model_ms:.2f} (daemon / model server {row['ratio']:.1f}); REST {row['rest']:.2f}/msg, "
                      f"events in {row['events']:.2f}, actions out {row['actions']:.2f} (+ as many seq_reply in); "
                      f"connections to the fake held {len(ports0)}, opened {opened}", flush=True)
    finally:
        stop.set()
        await poller
        for proc in reversed(procs):
            proc.stop()
        await p.stop()

    def med(key: str) -> str:
        values = [row[key] for row in rows]
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(f"\nMattermost, {args.rounds} bursts of {args.burst} new conversations; per message, median (min-max):")
    print("| | per message |\n| --- | --- |")
    for name, share in sorted(routes.items(), key=lambda kv: -kv[1]):
        print(f"| REST {name} | {share / max(1, answered):.2f} |")
    print(f"| websocket events to the bot (its own posts' and edits' echoes included) | {med('events')} |")
    print(f"| websocket actions from the bot (user_typing), each answered by a seq_reply frame | {med('actions')} |")
    print(f"| TCP connections to the fake opened during a burst (not per message) | {med('opened')} |")
    print(f"| the daemon's CPU ms | {med('cpu')} |")
    print(f"| the model server's CPU ms (the control: the same work every burst) | {med('model')} |")
    print(f"| daemon / model server | {med('ratio')} |")
    print(f"| msg/s | {med('rate')} |")
    return 0


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds a burst may take at most")
    parser.add_argument("--gateway-src", default=str(ROOT), help="the checkout whose daemon is measured")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
