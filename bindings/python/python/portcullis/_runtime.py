"""The background event loop on which ``_sync`` evaluations await ``async def`` policies.

A ``_sync`` call blocks its own thread, so a coroutine a policy returns cannot run on that
thread's loop; it runs on this one instead: a daemon thread started the first time it is
needed, shared by every engine of the process.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Awaitable, Optional

_lock = threading.Lock()
_loop: Optional[asyncio.AbstractEventLoop] = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The background loop, started on first use."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=run, name="portcullis-policies", daemon=True).start()
            started.wait()
            _loop = loop
        return _loop


class Pending:
    """A policy's awaitable running as a task on a loop, cancellable from any thread: the
    engine cancels it when the policy's deadline passes or its call is dropped."""

    __slots__ = ("_task", "_cancelled")

    def __init__(self) -> None:
        self._task: Optional["asyncio.Task[object]"] = None
        self._cancelled = False

    async def run(self, awaitable: "Awaitable[object]") -> object:
        """Awaits ``awaitable`` in the task running this coroutine."""
        self._task = asyncio.current_task()
        if self._cancelled:
            close = getattr(awaitable, "close", None)
            if callable(close):
                close()
            raise asyncio.CancelledError()
        return await awaitable

    def cancel(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancels the task from any thread (nothing when the loop is closed)."""
        self._cancelled = True

        def cancel_task() -> None:
            if self._task is not None:
                self._task.cancel()

        try:
            loop.call_soon_threadsafe(cancel_task)
        except RuntimeError:
            pass
