"""The sd_notify protocol: tell systemd we are ready, alive, reloading or stopping.

A datagram to `$NOTIFY_SOCKET` (a path, or an abstract socket when it starts with '@').
Without systemd the variable is unset and every call does nothing. The watchdog ping is sent
from a task on the event loop itself, so a stuck loop stops pinging and systemd restarts us.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.ops.systemd")


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        self.address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._watchdog: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, *lines: str) -> bool:
        if not self.address:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # Never block the event loop on a listener that is not reading.
                sock.setblocking(False)
                sock.sendto("\n".join(lines).encode(), target)
            return True
        except BlockingIOError:
            log.debug("sd_notify listener is not reading; dropped %s", lines[0])
            return False
        except OSError as e:  # systemd going away must not take the daemon with it
            log.warning("sd_notify failed: %s", e)
            return False

    def ready(self, status: str = "") -> None:
        self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> None:
        self.notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self) -> None:
        self.notify("STOPPING=1")

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def start_watchdog(self) -> None:
        """Ping at half the interval systemd asked for (WATCHDOG_USEC), if it asked, and if for us."""
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not self.address or not usec or (pid and pid != str(os.getpid())):
            return
        interval = int(usec) / 1_000_000 / 2
        self._watchdog = asyncio.create_task(self._ping(interval), name="systemd:watchdog")

    async def _ping(self, interval: float) -> None:
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    async def stop_watchdog(self) -> None:
        if self._watchdog is not None:
            await cancel_and_wait(self._watchdog)
            self._watchdog = None
