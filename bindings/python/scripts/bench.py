"""What a Python caller pays per call: a DSL rule and the approved-tools Rego bundle through
``evaluate_tool_call_sync``, beside the same allowlist written as a plain Python function called
directly (the floor), in microseconds per call.

Run it against an optimised build (``pip install ./bindings/python``, or ``maturin develop
--release``): ``python scripts/bench.py [calls]``. The bundle is read from
``$PORTCULLIS_OPA_FIXTURES``, else ``../shared/fixtures`` beside the repository.

``python scripts/bench.py --only CASE CALLS`` makes CALLS calls of one case (``plain-allow``,
``plain-deny``, ``dsl-allow``, ``dsl-deny``, ``bundle-allow``, ``bundle-deny``) and measures
nothing: for a profiler. Under ``valgrind --tool=callgrind``, the difference between the counts of
``CALLS`` and of ``0`` calls, divided by ``CALLS``, is the instructions per call, which do not move
with the machine's load as times do.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict

from portcullis import (
    DslToolCallPolicy,
    PolicyDenialError,
    PolicyEngine,
    PolicySet,
    RegoToolCallPolicy,
)

HERE = Path(__file__).resolve().parent
FIXTURES = Path(
    os.environ.get("PORTCULLIS_OPA_FIXTURES", HERE.parents[3] / "shared" / "fixtures")
).resolve()
APPROVED = ("web_search", "read_file", "summarize")


def context(tool: str) -> Dict[str, Any]:
    return {
        "tool_name": tool,
        "arguments": {"query": "weather"},
        "calling_message": {"role": "assistant", "content": "calling"},
        "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"},
    }


def per_call(call: Callable[[], Any], calls: int) -> float:
    """The best of five runs of ``calls`` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def settle_heap() -> None:
    """Moves what the setup made (modules, engines, compiled bundles) out of the garbage
    collector's way: a full collection during a measurement would otherwise walk all of it, in
    whichever case it fell, and that case would look slower by what the setup left behind."""
    gc.collect()
    gc.freeze()


def denied(evaluate: Callable[[Dict[str, Any]], Any], ctx: Dict[str, Any]) -> Callable[[], None]:
    def call() -> None:
        try:
            evaluate(ctx)
        except PolicyDenialError:
            pass

    return call


def main() -> None:
    only = None
    if len(sys.argv) == 4 and sys.argv[1] == "--only":
        only, calls = sys.argv[2], int(sys.argv[3])
    else:
        calls = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rules = Path(tempfile.mkdtemp())
    (rules / "approved.json").write_text(
        json.dumps(
            {
                "condition": {"field": "tool_name", "not_in": list(APPROVED)},
                "action": "deny",
                "reason": "Tool is not in the approved list.",
            }
        )
    )
    dsl = PolicyEngine(policy_set=PolicySet(tool_call=[DslToolCallPolicy("approved", rules)]))
    rego = PolicyEngine(
        policy_set=PolicySet(
            tool_call=[RegoToolCallPolicy("approved-tools", FIXTURES / "rego-wasm" / "approved-tools.tar.gz")]
        )
    )

    def plain(ctx: Dict[str, Any]) -> Dict[str, Any]:
        if ctx["tool_name"] not in APPROVED:
            raise PolicyDenialError("Tool is not in the approved list.", policy_id="approved", interception_point="tool_call")
        return ctx

    allowed, refused = context("web_search"), context("delete_everything")
    settle_heap()
    cases: Dict[str, Callable[[], Any]] = {
        "plain-allow": lambda: plain(allowed),
        "plain-deny": denied(plain, refused),
        "dsl-allow": lambda: dsl.evaluate_tool_call_sync(allowed),
        "dsl-deny": denied(dsl.evaluate_tool_call_sync, refused),
        "bundle-allow": lambda: rego.evaluate_tool_call_sync(allowed),
        "bundle-deny": denied(rego.evaluate_tool_call_sync, refused),
    }
    if only is not None:
        if only not in cases:
            sys.exit(f"unknown case {only!r}: one of {', '.join(cases)}")
        # Once before: whatever a first call sets up is not counted.
        cases[only]()
        for _ in range(calls):
            cases[only]()
        return
    floor = per_call(cases["plain-allow"], calls)
    rows = [
        ("plain Python function (allow)", floor),
        ("plain Python function (deny)", per_call(cases["plain-deny"], calls)),
        ("DSL rule, evaluate_tool_call_sync (allow)", per_call(cases["dsl-allow"], calls)),
        ("DSL rule, evaluate_tool_call_sync (deny)", per_call(cases["dsl-deny"], calls)),
        ("approved-tools bundle, evaluate_tool_call_sync (allow)", per_call(cases["bundle-allow"], calls)),
        ("approved-tools bundle, evaluate_tool_call_sync (deny)", per_call(cases["bundle-deny"], calls)),
    ]
    for name, micros in rows:
        print(f"{name:58} {micros:8.2f} µs/call  {micros / floor:7.1f}x the plain function")


if __name__ == "__main__":
    main()
