"""One engine shared by many coroutines and many threads."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

import pytest
from conftest import FIXTURES, bundle, input_ctx, tool_call_ctx

from portcullis import (
    Decision,
    DslInputPolicy,
    PolicyDenialError,
    PolicyEngine,
    PolicySet,
    RegoToolCallPolicy,
    input_policy,
    tool_call_policy,
)


@input_policy
async def yields_first(ctx):
    await asyncio.sleep(0)
    if ctx["messages"][0]["content"].endswith("7"):
        return Decision.deny("sevens are out")
    return Decision.redact([{"field": "messages.0.content", "strategy": "replace", "pattern": "n", "replacement": "N"}])


@tool_call_policy
def counts_calls(ctx):
    return Decision.allow()


def shared_engine(records: List[Dict[str, Any]]) -> PolicyEngine:
    return PolicyEngine(
        policy_set=PolicySet(
            input=[DslInputPolicy("no_ssn", FIXTURES / "dsl" / "input"), yields_first],
            tool_call=[counts_calls, RegoToolCallPolicy("approved-tools", bundle("approved-tools.tar.gz"))],
        ),
        on_audit=records.append,
    )


def test_many_coroutines_at_once():
    records: List[Dict[str, Any]] = []
    engine = shared_engine(records)

    async def one(index: int):
        try:
            forwarded = await engine.evaluate_input(input_ctx(f"n{index}"))
        except PolicyDenialError as denial:
            return ("denied", index, denial.reason)
        return ("forwarded", index, forwarded["messages"][0]["content"])

    async def main():
        return await asyncio.gather(*(one(index) for index in range(200)))

    results = asyncio.run(main())
    for kind, index, detail in results:
        if str(index).endswith("7"):
            assert (kind, detail) == ("denied", "sevens are out")
        else:
            assert (kind, detail) == ("forwarded", f"N{index}")
    # Each call's records went to on_audit with the call: two policies per call.
    assert len(records) == 400


def test_eight_threads_on_one_engine_with_the_sync_api():
    records: List[Dict[str, Any]] = []
    engine = shared_engine(records)
    lock = threading.Lock()
    seen: Dict[str, int] = {"denied": 0, "forwarded": 0}
    start = threading.Barrier(8)

    def worker(thread: int) -> None:
        start.wait()
        for index in range(50):
            tool = "web_search" if index % 2 else "rm_rf"
            try:
                engine.evaluate_tool_call_sync(tool_call_ctx(tool, {"thread": thread, "index": index}))
                kind = "forwarded"
                assert tool == "web_search"
            except PolicyDenialError as denial:
                kind = "denied"
                assert denial.reason == "Tool is not in the approved list."
            text = f"n{thread}-{index}"
            if text.endswith("7"):
                with pytest.raises(PolicyDenialError):
                    engine.evaluate_input_sync(input_ctx(text))
            else:
                forwarded = engine.evaluate_input_sync(input_ctx(text))
                assert forwarded["messages"][0]["content"] == "N" + text[1:]
            with lock:
                seen[kind] += 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(worker, range(8)))
    assert seen == {"denied": 200, "forwarded": 200}


def test_threads_and_coroutines_together():
    engine = shared_engine([])

    def in_thread() -> None:
        for index in range(20):
            with pytest.raises(PolicyDenialError):
                engine.evaluate_input_sync(input_ctx(f"x{index}7"))

    async def main():
        threads = [threading.Thread(target=in_thread) for _ in range(4)]
        for thread in threads:
            thread.start()
        results = await asyncio.gather(*(engine.evaluate_input(input_ctx(f"n{i}")) for i in range(0, 50, 2)))
        for thread in threads:
            await asyncio.to_thread(thread.join)
        return results

    results = asyncio.run(main())
    assert all(result["messages"][0]["content"].startswith("N") for result in results)
