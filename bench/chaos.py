#!/usr/bin/env python3
"""The gateway under faults, longer than CI runs it, with a table a user can read.

Per store (SQLite, PostgreSQL), the real daemon (`agent-gateway run`) against the fake Slack
(Socket Mode, redelivering unacked envelopes) and web API clients, the model an OpenAI-compatible
fake: a stream of messages with SIGKILL at random moments (at least 20 kills in a full run);
gated tool calls parked and decided while the daemon is killed; database faults (PostgreSQL
backends terminated and the database closed for seconds, SQLite locked by an admin); a 429
storm, fuzzed web requests and Socket Mode frames, fuzzed Telegram updates, Mattermost frames and
button callbacks on all three platforms (tests/chaos/platforms.py), Slack and Mattermost sockets
dropped and Telegram polls cut under a stream; with --soak, mixed traffic for 30 minutes with
RSS, open fds, asyncio tasks and database connections sampled every minute.

    .venv/bin/python bench/chaos.py             # the full run (no soak), ~10 minutes
    .venv/bin/python bench/chaos.py --quick     # smaller: a few kills, fewer inputs
    .venv/bin/python bench/chaos.py --soak      # plus the 30-minute soak per store (5 with --quick)
    .venv/bin/python bench/chaos.py --stores sqlite --lanes approvals --keep-logs /tmp/logs

Exit status 0 when nothing was lost, doubled or crashed. The harness is tests/chaos/harness.py.
A lane that reports a problem keeps its evidence (the daemon's log across every restart, the
tool's ops log, the database, what the fake Slack saw) in a folder the run prints, so a duplicate
or a loss can be explained afterwards rather than guessed at.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.chaos.faults import BUSY, Faults, stream_under_faults  # noqa: E402
from tests.chaos.harness import (  # noqa: E402
    Tally, count_after_drain, slack_conversation, stream_under_kills, web_conversation, world)
from tests.chaos.parked import approvals_under_kills  # noqa: E402
from tests.chaos.test_fuzz import fuzz_slack, fuzz_web  # noqa: E402
from tests.chaos import harness, platforms  # noqa: E402
from tests.chaos.test_fuzz_platforms import (  # noqa: E402
    _runner, fuzz_mattermost, fuzz_mattermost_actions, fuzz_slack_buttons, fuzz_telegram, still_answered)


@dataclass
class Row:
    tally: Tally
    storm_sent: int = 0
    storm_answered: int = 0
    storm_wrong: int = 0
    absorbed_429: int = 0
    fuzz_tried: int = 0
    fuzz_crashes: int = 0
    fuzz_tracebacks: int = 0
    drops: platforms.Drops = field(default_factory=platforms.Drops)
    drops_tally: Tally = field(default_factory=Tally)
    mm_resumes: int = 0
    slopes: dict[str, float] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)
    approvals: Tally = field(default_factory=Tally)  # gated conversations under kills
    faults: Faults = field(default_factory=Faults)
    fault_tally: Tally = field(default_factory=Tally)  # the stream under database faults


@dataclass
class Keep:
    """Where lanes that reported a problem leave their evidence; taken while the lane's world is
    still up (a PostgreSQL database is dropped, the temporary directory removed, right after)."""

    root: Path
    kept: list[Path] = field(default_factory=list)

    async def lane(self, store: str, lane: str, directory: Path, w: harness.World | platforms.World,
                   problems: list[str]) -> None:
        if not problems:
            return
        url, slack = w.url, w.slack
        dest = self.root / f"{store}-{lane}"
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "problems.txt").write_text("\n".join(problems) + "\n")
        for name in ("daemon.log", "ops.log", "samples.jsonl"):  # the daemon's log holds every restart (it appends)
            if (directory / name).exists():
                shutil.copy(directory / name, dest / name)
        await asyncio.to_thread(_dump_database, url, dest)
        # What a person saw, every Web API call the daemon made, when each kill landed (UTC, to line
        # up with the daemon's log), and what the model was asked (the tool results it was given).
        with open(dest / "slack_messages.jsonl", "w") as f:
            for m in slack.messages:
                f.write(json.dumps(dataclasses.asdict(m), default=str) + "\n")
        with open(dest / "slack_calls.jsonl", "w") as f:
            for c in slack.calls:
                f.write(json.dumps({**dataclasses.asdict(c), "utc": _utc(c.at)}, default=str) + "\n")
        (dest / "kills.txt").write_text("".join(f"{_utc(at)}\n" for at in w.daemon.killed_at))
        with open(dest / "model_requests.jsonl", "w") as f:
            for r in w.model.requests:
                f.write(json.dumps(r["messages"][-3:], default=str) + "\n")
        self.kept.append(dest)
        print(f"{store} {lane}: {len(problems)} problem(s); evidence kept in {dest}", file=sys.stderr)


def _utc(monotonic: float) -> str:
    """A monotonic time as the daemon's log shows wall-clock time (UTC, milliseconds)."""
    at = monotonic + time.time() - time.monotonic()
    return time.strftime("%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}"


def _dump_database(url: str, dest: Path) -> None:
    """SQLite: an online backup (consistent while the daemon writes); PostgreSQL: pg_dump."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as src, sqlite3.connect(dest / "gateway.db") as out:
            src.backup(out)
    else:
        result = subprocess.run(["pg_dump", "--no-owner", "-f", str(dest / "database.sql"),
                                 url.replace("postgresql+asyncpg", "postgresql")],
                                capture_output=True, text=True, timeout=120)
        if result.returncode:
            print(f"  pg_dump failed: {result.stderr.strip()[:300]}", file=sys.stderr)


def _problems(*tallies: Tally) -> list[str]:
    return [p for t in tallies for p in t.problems]


async def kills(store: str, tmp: Path, duration: float, min_kills: int, keep: Keep) -> Tally:
    async with world(tmp / "kills", store) as w:
        tally = await stream_under_kills(w, Tally(store), slack_threads=8, web_conversations=6, duration=duration,
                                         every=(1.5, 4.0), wait=120, seed=int(time.time()), min_kills=min_kills)
        await keep.lane(store, "kills", tmp / "kills", w, _problems(tally))
        return tally


async def approvals(store: str, tmp: Path, duration: float, min_kills: int, row: Row, keep: Keep) -> None:
    """Gated calls parked, the daemon killed meanwhile, every card decided (half at once)."""
    async with world(tmp / "approvals", store, gated=True) as w:
        row.approvals = Tally(store)
        await approvals_under_kills(w, row.approvals, slack_lanes=4, web_lanes=4, duration=duration,
                                    every=(1.5, 4.0), wait=120, seed=int(time.time()), min_kills=min_kills)
        await keep.lane(store, "approvals", tmp / "approvals", w, _problems(row.approvals))


async def database_faults(store: str, tmp: Path, duration: float, row: Row, keep: Keep) -> None:
    """PostgreSQL: backends terminated and the database closed for seconds; SQLite: locked by an admin."""
    async with world(tmp / "faults", store, busy_timeout=BUSY) as w:
        row.fault_tally = Tally(store)
        await stream_under_faults(w, row.fault_tally, row.faults, store, duration, wait=120)
        problems = _problems(row.fault_tally)
        if row.faults.unanswered:
            problems.append(f"/readyz unanswered {row.faults.unanswered} times during faults")
        await keep.lane(store, "faults", tmp / "faults", w, problems)


async def storm(store: str, tmp: Path, duration: float, row: Row, keep: Keep) -> None:
    async with world(tmp / "storm", store) as w:
        w.slack.storm_share = 0.3
        tally = Tally(store)
        until = time.monotonic() + duration
        await asyncio.gather(*(slack_conversation(w, tally, until, wait=120, tag=f"r{i}") for i in range(8)))
        await asyncio.sleep(2)
        from tests.chaos.harness import ANSWER, thread_answers

        row.storm_sent = tally.sent
        row.storm_answered = tally.answered
        row.storm_wrong = sum(
            [x.strip() for x in thread_answers(w.slack, t)] != [ANSWER] * n for t, n in tally.threads)
        row.absorbed_429 = w.slack.storm_429s
        problems = _problems(tally)
        if row.storm_wrong or row.storm_answered != row.storm_sent:
            problems.append(f"storm: {row.storm_answered}/{row.storm_sent} answered, {row.storm_wrong} threads wrong")
        await keep.lane(store, "storm", tmp / "storm", w, problems)


async def fuzz(store: str, tmp: Path, examples: int, row: Row, keep: Keep) -> None:
    async with world(tmp / "fuzz", store) as w:
        request = urllib.request.Request(f"{w.api}/api/v1/conversations", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        conv = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(request, timeout=10).read()))["id"]
        loop = asyncio.get_running_loop()
        problems: list[str] = []
        try:
            row.fuzz_tried += await asyncio.to_thread(fuzz_web, w, conv, examples)
            row.fuzz_tried += await asyncio.to_thread(fuzz_slack, w, loop, examples)
        except AssertionError as e:  # a 500: counted as a failure of the daemon to hold
            row.fuzz_crashes += 1
            problems.append(f"fuzz: {e}")
            print(f"  fuzz: {str(e)[:300]}", file=sys.stderr)
        _daemon_held(w, row, "fuzz", problems)
        await keep.lane(store, "fuzz", tmp / "fuzz", w, problems)


def _tracebacks(w: platforms.World, row: Row, lane: str, problems: list[str]) -> None:
    """Tracebacks in the daemon's log after a lane: counted, and each lane's a problem of its own."""
    tracebacks = w.daemon.log().count("Traceback")
    row.fuzz_tracebacks += tracebacks
    if tracebacks:
        problems.append(f"{lane}: {tracebacks} traceback(s) in the daemon's log")


def _daemon_held(w: platforms.World, row: Row, lane: str, problems: list[str]) -> None:
    """After a fuzz lane: a daemon that exited is a crash; a traceback in its log a problem."""
    if w.daemon.proc is None or w.daemon.proc.returncode is not None:
        row.fuzz_crashes += 1
        problems.append(f"{lane}: the daemon exited")
    _tracebacks(w, row, lane, problems)


async def drops(store: str, tmp: Path, duration: float, row: Row, keep: Keep) -> None:
    """Slack and Mattermost websockets dropped at random, Telegram long polls cut, under a stream."""
    async with platforms.world(tmp / "drops", store) as w:
        row.drops_tally = Tally(store)
        row.drops = await platforms.stream_under_drops(w, row.drops_tally, conversations=4, duration=duration,
                                                      every=(0.8, 2.5), poll_cut_share=0.3, wait=120,
                                                      seed=int(time.time()))
        row.mm_resumes = w.mattermost.websocket_resumes
        problems = _problems(row.drops_tally)
        _tracebacks(w, row, "drops", problems)
        await keep.lane(store, "drops", tmp / "drops", w, problems)


async def platform_fuzz(store: str, tmp: Path, examples: int, row: Row, keep: Keep) -> None:
    """Telegram updates, Mattermost frames and button callbacks on all three platforms."""
    async with platforms.world(tmp / "pfuzz", store) as w:
        person = w.mattermost.add_user("fuzzy")
        dm = w.mattermost.direct_channel(person["id"], w.mm_bot["id"])["id"]
        run = _runner(asyncio.get_running_loop())
        problems: list[str] = []
        try:
            row.fuzz_tried += await asyncio.to_thread(fuzz_telegram, w, run, examples)
            row.fuzz_tried += await asyncio.to_thread(fuzz_mattermost, w, run, examples, person, dm)
            row.fuzz_tried += await asyncio.to_thread(fuzz_mattermost_actions, w, examples, dm)
            row.fuzz_tried += await asyncio.to_thread(fuzz_slack_buttons, w, run, examples)
            await still_answered(w)
        except AssertionError as e:  # a 500, or the next good message not answered once
            row.fuzz_crashes += 1
            problems.append(f"platform fuzz: {e}")
            print(f"  platform fuzz: {str(e)[:300]}", file=sys.stderr)
        _daemon_held(w, row, "platform fuzz", problems)
        await keep.lane(store, "pfuzz", tmp / "pfuzz", w, problems)


def _sample(pid: int, api: str, store: str, db_files: Path) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]
    fds = os.listdir(f"/proc/{pid}/fd")
    with urllib.request.urlopen(f"{api}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    tasks = float(re.search(r"^gateway_asyncio_tasks (\S+)", metrics, re.M).group(1))  # type: ignore[union-attr]
    if store == "sqlite":
        conns = sum(os.path.realpath(f"/proc/{pid}/fd/{fd}").startswith(str(db_files)) for fd in fds
                    if os.path.exists(f"/proc/{pid}/fd/{fd}"))
    else:
        conns = sum(1 for fd in fds if "socket" in os.path.realpath(f"/proc/{pid}/fd/{fd}"))
    return {"rss_mib": rss, "fds": float(len(fds)), "tasks": tasks, "db_conns": float(conns)}


def _slope_per_hour(samples: list[dict[str, float]], key: str, minutes: float) -> float:
    ys = [s[key] for s in samples]
    xs = [i * minutes / 60 for i in range(len(ys))]
    if len(ys) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


async def soak(store: str, tmp: Path, minutes: float, every: float, row: Row, keep: Keep) -> None:
    async with world(tmp / "soak", store) as w:
        assert w.daemon.proc is not None
        tally = Tally(store)
        until = time.monotonic() + minutes * 60
        rng = random.Random(7)

        async def traffic() -> None:
            # Conversations of a few messages each, a new one when one ends: many conversations, steady load.
            async def lane(i: int) -> None:
                n = 0
                while time.monotonic() < until:
                    n += 1
                    end = min(until, time.monotonic() + rng.uniform(5, 20))
                    if i % 2:
                        await web_conversation(w, tally, end, wait=120, tag=f"k{i}.{n}")
                    else:
                        await slack_conversation(w, tally, end, wait=120, tag=f"k{i}.{n}")
            await asyncio.gather(*(lane(i) for i in range(6)))

        load = asyncio.create_task(traffic())
        while time.monotonic() < until:
            row.samples.append(await asyncio.to_thread(_sample, w.daemon.proc.pid, w.api, store, tmp / "soak"))
            await asyncio.sleep(every)
        await load
        await count_after_drain(w, tally)  # the soak's duplicates count too, not only its losses
        after_warmup = row.samples[1:] if len(row.samples) > 2 else row.samples
        row.slopes = {k: _slope_per_hour(after_warmup, k, every / 60) for k in ("rss_mib", "fds", "tasks", "db_conns")}
        row.tally.sent += tally.sent
        row.tally.admitted += tally.admitted
        row.tally.answered += tally.answered
        row.tally.lost += tally.lost
        row.tally.duplicated += tally.duplicated
        row.tally.wrong += tally.wrong
        row.tally.problems += [f"soak: {p}" for p in tally.problems]
        with open(tmp / "soak" / "samples.jsonl", "w") as f:
            f.writelines(json.dumps(s) + "\n" for s in row.samples)
        problems = _problems(tally)
        if any(row.slopes[k] > 0 for k in ("fds", "tasks", "db_conns")):  # RSS: judged by a person from the slope
            problems.append(f"soak: slopes {row.slopes}")
        await keep.lane(store, "soak", tmp / "soak", w, problems)


def table(rows: list[Row], soaked: bool) -> str:
    def line(label: str, values: list[str]) -> str:
        return f"| {label:40} | " + " | ".join(f"{v:>22}" for v in values) + " |"

    out = [line("", [r.tally.store for r in rows]), "|" + "-" * 42 + ("|" + "-" * 24) * len(rows) + "|"]
    t = [r.tally for r in rows]
    out.append(line("kills survived (SIGKILL + restart)", [str(x.kills) for x in t]))
    out.append(line("messages admitted / answered", [f"{x.admitted} / {x.answered}" for x in t]))
    out.append(line("answers duplicated / lost / wrong", [f"{x.duplicated} / {x.lost} / {x.wrong}" for x in t]))
    out.append(line("Slack envelopes redelivered", [str(x.redelivered) for x in t]))
    out.append(line("approvals parked / resumed (kills)",
                    [f"{r.approvals.parked} / {r.approvals.resumed} ({r.approvals.kills})" for r in rows]))
    out.append(line("approvals duplicated / lost", [f"{r.approvals.duplicated} / {r.approvals.lost}" for r in rows]))
    out.append(line("  approved, killed before its call", [str(r.approvals.unstarted) for r in rows]))
    out.append(line("db faults (terminated or locks, closed)",
                    [f"{r.faults.done}, {r.faults.closed}" for r in rows]))
    out.append(line("  messages answered / admitted", [f"{r.fault_tally.answered} / {r.fault_tally.admitted}"
                                                       for r in rows]))
    out.append(line("  duplicated / lost; /readyz unanswered",
                    [f"{r.fault_tally.duplicated} / {r.fault_tally.lost}; {r.faults.unanswered}" for r in rows]))
    out.append(line("429s absorbed (answers right / sent)",
                    [f"{r.absorbed_429} ({r.storm_answered - r.storm_wrong}/{r.storm_sent})" for r in rows]))
    out.append(line("malformed inputs tried / crashes", [f"{r.fuzz_tried} / {r.fuzz_crashes}" for r in rows]))
    out.append(line("tracebacks in the log (fuzz, drops)", [str(r.fuzz_tracebacks) for r in rows]))
    out.append(line("drops: Slack / Mattermost / TG polls cut",
                    [f"{r.drops.slack} / {r.drops.mattermost} / {r.drops.telegram_polls}" for r in rows]))
    out.append(line("under drops: answered / sent", [f"{r.drops_tally.answered} / {r.drops_tally.sent}" for r in rows]))
    out.append(line("under drops: duplicated / lost / wrong",
                    [f"{r.drops_tally.duplicated} / {r.drops_tally.lost} / {r.drops_tally.wrong}" for r in rows]))
    out.append(line("Mattermost streams resumed / caught up", [f"{r.mm_resumes} / {r.drops.mattermost_fresh}"
                                                                for r in rows]))
    if soaked:
        for key, unit in (("rss_mib", "MiB/h"), ("fds", "fds/h"), ("tasks", "tasks/h"), ("db_conns", "conns/h")):
            out.append(line(f"soak slope after warm-up: {key}", [f"{r.slopes.get(key, 0):+.2f} {unit}" for r in rows]))
        out.append(line("soak samples (first -> last RSS MiB)",
                        [f"{len(r.samples)} ({r.samples[0]['rss_mib']:.0f} -> {r.samples[-1]['rss_mib']:.0f})"
                         if r.samples else "-" for r in rows]))
    return "\n".join(out)


LANES = ("kills", "approvals", "faults", "storm", "fuzz", "pfuzz", "drops")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few kills and fewer inputs; a 5-minute soak")
    parser.add_argument("--soak", action="store_true", help="also soak each store (30 minutes; 5 with --quick)")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--lanes", default=",".join(LANES),
                        help=f"which lanes to run, comma-separated (default all: {','.join(LANES)}); "
                             "--soak adds the soak")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="where lanes that report a problem keep their evidence "
                             "(default: a new temporary folder, removed when nothing was kept)")
    args = parser.parse_args()
    lanes = set(args.lanes.split(","))
    if unknown := lanes - set(LANES):
        parser.error(f"unknown lanes: {', '.join(sorted(unknown))}")
    keep = Keep(args.keep_logs or Path(tempfile.mkdtemp(prefix="chaos-logs-")))
    keep.root.mkdir(parents=True, exist_ok=True)
    print(f"evidence of any lane that reports a problem goes to {keep.root}", file=sys.stderr)
    # The fake model's streams are cut by every kill; aiohttp logs each cut with a traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    kill_s, storm_s, examples = (30.0, 15.0, 60) if args.quick else (150.0, 40.0, 400)
    approvals_s, faults_s = (20.0, 20.0) if args.quick else (90.0, 60.0)
    drop_s = 20.0 if args.quick else 90.0
    soak_min, sample_every = (5.0, 60.0) if args.quick else (30.0, 60.0)
    rows: list[Row] = []
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix=f"chaos-{store}-") as d:
            tmp = Path(d)
            started = time.monotonic()
            row = Row(Tally(store))
            if "kills" in lanes:
                row.tally = await kills(store, tmp, kill_s, 3 if args.quick else 20, keep)
                print(f"{store}: kills done in {time.monotonic() - started:.0f}s: {row.tally.kills} kills, "
                      f"{row.tally.lost} lost, {row.tally.duplicated} duplicated", file=sys.stderr)
                for problem in row.tally.problems[:10]:
                    print(f"  {problem}", file=sys.stderr)
            if "approvals" in lanes:
                await approvals(store, tmp, approvals_s, 3 if args.quick else 20, row, keep)
                print(f"{store}: approvals: {row.approvals.parked} parked, {row.approvals.resumed} resumed, "
                      f"{row.approvals.kills} kills, {row.approvals.unstarted} approved calls killed before "
                      "they ran (not run again, the model told)", file=sys.stderr)
                for problem in row.approvals.problems[:10]:
                    print(f"  {problem}", file=sys.stderr)
            if "faults" in lanes:
                await database_faults(store, tmp, faults_s, row, keep)
                for problem in row.fault_tally.problems[:10]:
                    print(f"  {problem}", file=sys.stderr)
            if "storm" in lanes:
                await storm(store, tmp, storm_s, row, keep)
            if "fuzz" in lanes:
                await fuzz(store, tmp, examples, row, keep)
            if "pfuzz" in lanes:
                await platform_fuzz(store, tmp, examples, row, keep)
            if "drops" in lanes:
                await drops(store, tmp, drop_s, row, keep)
                for problem in row.drops_tally.problems[:10]:
                    print(f"  drops: {problem}", file=sys.stderr)
            if args.soak:
                await soak(store, tmp, soak_min, sample_every, row, keep)
                print(f"{store}: soak done: {len(row.samples)} samples, slopes {row.slopes}", file=sys.stderr)
            rows.append(row)
    if keep.kept:
        print(f"evidence kept for {len(keep.kept)} lane(s) in {keep.root}: "
              f"{', '.join(p.name for p in keep.kept)}", file=sys.stderr)
    elif args.keep_logs is None:
        shutil.rmtree(keep.root, ignore_errors=True)
    print(table(rows, args.soak))
    bad = any(r.tally.lost or r.tally.duplicated or r.tally.wrong or r.fuzz_crashes or r.storm_wrong
              or r.storm_answered != r.storm_sent or r.approvals.lost or r.approvals.duplicated or r.approvals.wrong
              or r.approvals.problems or r.approvals.resumed != r.approvals.parked
              or r.fault_tally.lost or r.fault_tally.duplicated or r.fault_tally.wrong or r.faults.unanswered
              or r.drops_tally.lost or r.drops_tally.duplicated or r.drops_tally.wrong
              for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
