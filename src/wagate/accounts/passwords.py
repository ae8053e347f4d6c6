"""argon2 on a small pool of its own, with a bounded queue (API.md section 12, "Under attack").

Each check takes argon2id's 64 MiB and about 50 ms of a core on purpose. On the default thread pool a
burst of sign-ins ran as many at once as that pool has threads (and held up the event deliveries that
share it): memory grew by 64 MiB a check. Here at most `WORKERS` run at once, at most `QUEUE` more
wait their turn, and any further attempt is refused at once with 429, so a burst costs
`WORKERS` x 64 MiB and a second of waiting at worst, never the process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from wagate.core.errors import PasswordChecksBusy

T = TypeVar("T")

WORKERS = 2
QUEUE = 16


class PasswordChecks:
    def __init__(self, *, workers: int = WORKERS, queue: int = QUEUE) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="password")
        self._room = workers + queue
        self._taken = 0
        self._lock = threading.Lock()  # apps of several event loops (tests) share the pool

    async def run(self, check: Callable[[], T]) -> T:
        """`check()` on the pool; PasswordChecksBusy (429, Retry-After: 1) when the queue is full."""
        with self._lock:
            if self._taken >= self._room:
                raise PasswordChecksBusy(headers={"Retry-After": "1"})
            self._taken += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, check)
        finally:
            with self._lock:
                self._taken -= 1


# One per process: the bound is on the process's memory, whatever number of apps it runs.
password_checks = PasswordChecks()
