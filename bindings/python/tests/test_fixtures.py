"""The bindings' shared fixture table (``bindings/fixtures/table.json``) through the package:
every case decides as the table says, which is what the Rust engine decides on the same files
and contexts (``bindings/node/tests/fixture_table.rs`` checks the table against the engine)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict

import pytest
from conftest import FIXTURES, OPA_FIXTURES

import portcullis
from portcullis import PolicyDenialError, PolicyEngine, PolicySet

TABLE = json.loads((FIXTURES / "table.json").read_text())
CASES = TABLE["cases"]

CLASSES = {
    ("dsl", "input"): portcullis.DslInputPolicy,
    ("dsl", "tool_call"): portcullis.DslToolCallPolicy,
    ("dsl", "output"): portcullis.DslOutputPolicy,
    ("rego", "input"): portcullis.RegoInputPolicy,
    ("rego", "tool_call"): portcullis.RegoToolCallPolicy,
    ("rego", "output"): portcullis.RegoOutputPolicy,
}


def engine_for(case: Dict[str, Any]) -> PolicyEngine:
    policy = case["policy"]
    kind = "dsl" if "dsl" in policy else "rego"
    where = FIXTURES / policy["dsl"] if kind == "dsl" else OPA_FIXTURES / policy["rego"]
    native = CLASSES[(kind, case["point"])](policy["id"], where)
    return PolicyEngine(policy_set=PolicySet(**{case["point"]: [native]}))


def outcome(evaluate, ctx: Dict[str, Any]) -> Dict[str, Any]:
    try:
        forwarded = evaluate(ctx)
    except PolicyDenialError as denial:
        return {"denied": {"policy_id": denial.policy_id, "reason": denial.reason}}
    return {"forwarded": None if forwarded is ctx else forwarded}


def test_the_table_has_cases():
    assert len(CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_package_gives_the_tables_answers(case):
    engine = engine_for(case)
    point = case["point"]
    ctx = case["context"]

    def sync(c):
        return engine.evaluate_sync(point, c)

    def via_asyncio(c):
        return asyncio.run(engine.evaluate(point, c))

    assert outcome(sync, ctx) == case["expect"]
    assert outcome(via_asyncio, ctx) == case["expect"]
