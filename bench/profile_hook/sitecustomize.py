"""cProfile on demand in a bench's child process (bench/cpu_diff.py puts this folder on PYTHONPATH).

SIGUSR1 starts a profile of the main thread (the event loop's), SIGUSR2 stops it and writes it to
$CPU_DIFF_STATS/<pid>-<n>.pstats, with the garbage collector's passes meanwhile (per generation:
how many, their CPU, the longest, objects collected) in <pid>-<n>.gc.json. When the file
$CPU_DIFF_STATS/mode says "gc", only the collector's passes are counted (no cProfile, so its CPU is
the unprofiled process's). Call counts do not move with the
machine's load, so two processes' runs compare by them where their CPU times, minutes apart, would not.

Mode "untimed": cProfile as "profile", with what the gateway does by the clock held off while it
runs: a reply's first draft (each chat adapter's `limits.first_draft_after`) and the runner's typing
renewals (`TYPING_EVERY`). cProfile slows a burst several times over, so its runs outlast the
1 s draft hold and their queue's 4 s typing renewal: a profiled Telegram burst made 4.9 Bot API calls
a message where the same burst unprofiled makes 2.0 (sendChatAction, sendMessage), and its counts were
of work the burst does not do. Restored when the profile stops.
"""

import cProfile
import gc
import json
import os
import signal
import time

_directory = os.environ.get("CPU_DIFF_STATS")
_state: dict[str, object] = {"profile": None, "n": 0, "gc": None, "began": 0}
_held: list[tuple[object, str, object]] = []  # "untimed": (owner, attribute, its value before)


def _on_gc(phase: str, info: dict[str, int]) -> None:
    passes = _state["gc"]
    if not isinstance(passes, list):
        return
    if phase == "start":
        _state["began"] = time.thread_time_ns()
    else:
        g = info["generation"]
        took = time.thread_time_ns() - int(_state["began"])  # type: ignore[call-overload]
        passes[g][0] += 1
        passes[g][1] += took
        passes[g][2] += info["collected"]
        passes[g][3] = max(passes[g][3], took)


def _start(*_: object) -> None:
    _state["gc"] = [[0, 0, 0, 0] for _ in range(3)]
    with open(os.path.join(str(_directory), "mode")) as f:
        mode = f.read().strip()
    if mode == "gc":
        _state["profile"] = "gc"
        return
    if mode == "untimed":
        _hold_timed_work()
    # The thread's own CPU time, not the wall clock: on a loaded machine a function the process was
    # descheduled in would be charged the wait (and the main thread's profile, another thread's turn).
    profile = cProfile.Profile(time.thread_time_ns, 1e-9)
    _state["profile"] = profile
    profile.enable()


def _hold_timed_work() -> None:
    """No first draft and no typing renewal while profiling (the module docstring says why)."""
    import dataclasses
    import sys

    runner = sys.modules.get("gateway.runs.runner")
    if runner is not None:
        _held.append((runner, "TYPING_EVERY", runner.TYPING_EVERY))
        runner.TYPING_EVERY = 1e9
    for name, module in list(sys.modules.items()):
        if not (name.startswith("adapters.") and name.endswith(".adapter")):
            continue
        for cls in vars(module).values():
            limits = vars(cls).get("limits") if isinstance(cls, type) else None
            if getattr(limits, "first_draft_after", 0) > 0:  # 0: a platform that drafts at once, as unprofiled
                _held.append((cls, "limits", limits))
                cls.limits = dataclasses.replace(limits, first_draft_after=1e9)


def _stop(*_: object) -> None:
    while _held:
        owner, attribute, value = _held.pop()
        setattr(owner, attribute, value)
    profile = _state["profile"]
    if profile is not None:
        if isinstance(profile, cProfile.Profile):
            profile.disable()
        n = int(_state["n"])  # type: ignore[call-overload]
        _state["n"] = n + 1
        base = os.path.join(str(_directory), f"{os.getpid()}-{n}")
        with open(base + ".gc.json", "w") as f:
            json.dump({"passes": _state["gc"], "counts": gc.get_count(), "threshold": gc.get_threshold(),
                       "tracked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}, f)
        _state["gc"] = None
        if isinstance(profile, cProfile.Profile):
            profile.dump_stats(base + ".tmp")
        else:
            open(base + ".tmp", "w").close()
        os.replace(base + ".tmp", base + ".pstats")  # whole, and after the .gc.json: the bench waits for it
        _state["profile"] = None


if _directory:
    if os.environ.get("CPU_DIFF_GC_THRESHOLD"):  # an experiment's: the collector's thresholds, "700,10,10"
        gc.set_threshold(*(int(t) for t in os.environ["CPU_DIFF_GC_THRESHOLD"].split(",")))
    gc.callbacks.append(_on_gc)
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
