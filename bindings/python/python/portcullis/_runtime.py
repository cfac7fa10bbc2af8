"""The background event loop on which ``_sync`` evaluations await ``async def`` policies.

A ``_sync`` call blocks its own thread, so a coroutine a policy returns cannot run on that
thread's loop; it runs on this one instead: a daemon thread started the first time it is
needed, shared by every engine of the process.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Optional

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
