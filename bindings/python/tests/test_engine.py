"""Every call of §17.3 as a user writes it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import FIXTURES, bundle, input_ctx, output_ctx, tool_call_ctx, tool_result_ctx

import portcullis
from portcullis import (
    ApprovalRequired,
    Decision,
    DslInputPolicy,
    PolicyDenialError,
    PolicyEngine,
    PolicyEvaluationError,
    PolicySet,
    input_policy,
    output_policy,
    tool_call_policy,
    tool_result_policy,
)


@input_policy
def no_ssn(ctx):
    if any("SSN" in message["content"] for message in ctx["messages"]):
        return Decision.deny("No social security numbers.")
    return Decision.allow()


@tool_call_policy(id="no-shell")
def no_shell(ctx):
    return Decision.deny("no shell") if ctx["tool_name"] == "shell" else Decision.allow()


@tool_result_policy
async def strip_secrets(ctx):
    await asyncio.sleep(0)
    return Decision.redact([portcullis.replace("content", r"sk-[a-z0-9]+", "[KEY]")])


@output_policy
def shout(ctx):
    return {"decision": "transform", "transformation": {"operations": [portcullis.append("response.content", "!")]}}


class MaxMessages:
    """A policy as a class with a plain evaluate."""

    id = "max_messages"

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def evaluate(self, ctx):
        if len(ctx["messages"]) > self.limit:
            return Decision.deny("too long")
        return Decision.allow()


class SlowAudit:
    """A policy as a class with an async evaluate."""

    id = "slow_audit"

    async def evaluate(self, ctx):
        await asyncio.sleep(0.001)
        return Decision.audit("looked")


def engine_with_all_points(records: List[Dict[str, Any]]) -> PolicyEngine:
    return PolicyEngine(
        policy_set=PolicySet(
            input=[no_ssn, MaxMessages(3), SlowAudit()],
            tool_call=[no_shell],
            output=[shout],
            tool_result=[strip_secrets],
            on_error="deny",
        ),
        on_audit=records.append,
    )


def test_sync_calls_at_every_point():
    records: List[Dict[str, Any]] = []
    engine = engine_with_all_points(records)

    ctx = input_ctx("hello")
    assert engine.evaluate_input_sync(ctx) is ctx
    with pytest.raises(PolicyDenialError) as denied:
        engine.evaluate_input_sync(input_ctx("my SSN is 1"))
    assert denied.value.policy_id == "no_ssn"
    assert denied.value.interception_point == "input"
    assert denied.value.reason == "No social security numbers."
    assert str(denied.value) == "No social security numbers."

    with pytest.raises(PolicyDenialError) as denied:
        engine.evaluate_tool_call_sync(tool_call_ctx("shell"))
    assert (denied.value.policy_id, denied.value.interception_point) == ("no-shell", "tool_call")
    assert engine.evaluate_tool_call_sync(tool_call_ctx("search"))["tool_name"] == "search"

    forwarded = engine.evaluate_tool_result_sync(tool_result_ctx("fetch", "key sk-abc123 here"))
    assert forwarded["content"] == "key [KEY] here"

    assert engine.evaluate_output_sync(output_ctx("hi"))["response"]["content"] == "hi!"

    decisions = [(r["policy_id"], r["decision"], r["interception_point"]) for r in records]
    assert decisions[:4] == [
        ("no_ssn", "allow", "input"),
        ("max_messages", "allow", "input"),
        ("slow_audit", "audit", "input"),
        ("no_ssn", "deny", "input"),
    ]
    assert ("strip_secrets", "redact", "tool_result") in decisions
    assert ("shout", "transform", "output") in decisions
    first = records[0]
    assert first["context"] == input_ctx("hello")
    assert first["timestamp"].endswith("Z")
    assert first["enforced"] is True


def test_async_calls_at_every_point():
    records: List[Dict[str, Any]] = []
    engine = engine_with_all_points(records)

    async def main():
        ctx = input_ctx("hello")
        assert await engine.evaluate_input(ctx) is ctx
        with pytest.raises(PolicyDenialError):
            await engine.evaluate_input(input_ctx("a", "b", "c", "d"))
        with pytest.raises(PolicyDenialError):
            await engine.evaluate_tool_call(tool_call_ctx("shell"))
        result = await engine.evaluate_tool_result(tool_result_ctx("fetch", "sk-zz9"))
        assert result["content"] == "[KEY]"
        answer = await engine.evaluate_output(output_ctx("ok"))
        assert answer["response"]["content"] == "ok!"

    asyncio.run(main())
    assert ("max_messages", "deny", "input") in [
        (r["policy_id"], r["decision"], r["interception_point"]) for r in records
    ]


def test_the_original_context_is_left_alone_when_a_policy_changes_it():
    @input_policy
    def mask_first(ctx):
        return Decision.redact([portcullis.mask("messages[0].content")])

    engine = PolicyEngine(policy_set=PolicySet(input=[mask_first]))
    ctx = input_ctx("secret")
    forwarded = engine.evaluate_input_sync(ctx)
    assert forwarded is not ctx
    assert forwarded["messages"][0]["content"] == "[REDACTED]"
    assert ctx["messages"][0]["content"] == "secret"


def test_every_decision_kind_by_name_and_as_a_dict():
    assert Decision.allow() == {"decision": "allow"}
    assert Decision.allow(audit=True, labels=["x"]) == {"decision": "allow", "audit": True, "labels": ["x"]}
    assert Decision.deny("no", policy_id="p") == {"decision": "deny", "reason": "no", "policy_id": "p"}
    assert Decision.audit("seen").kind == "audit"
    assert Decision.audit("seen").reason == "seen"
    assert Decision.escalate("ask").kind == "escalate"
    assert Decision.transform([portcullis.set_field("metadata.x", 1)]) == {
        "decision": "transform",
        "transformation": {"operations": [{"op": "set", "field": "metadata.x", "value": 1}]},
    }
    assert portcullis.remove("messages.1") == {"field": "messages.1", "strategy": "remove"}
    assert portcullis.prepend("a", "b") == {"op": "prepend", "field": "a", "value": "b"}

    @input_policy
    def as_dict(ctx):
        return {"decision": "deny", "reason": "plain dict", "policy_id": "named-in-decision"}

    engine = PolicyEngine(policy_set=PolicySet(input=[as_dict]))
    with pytest.raises(PolicyDenialError) as denied:
        engine.evaluate_input_sync(input_ctx("x"))
    assert denied.value.policy_id == "named-in-decision"


def test_denials_the_engine_raises_and_a_caller_builds_are_alike():
    @input_policy
    def no(ctx):
        return Decision.deny("not today")

    with pytest.raises(PolicyDenialError) as denied:
        PolicyEngine(policy_set=PolicySet(input=[no])).evaluate_input_sync(input_ctx("x"))
    built = PolicyDenialError(
        "not today", policy_id="no", interception_point="input", reason="not today"
    )
    for error in (denied.value, built):
        assert (str(error), error.args) == ("not today", ("not today",))
        assert (error.policy_id, error.interception_point, error.reason) == ("no", "input", "not today")

    class Refusal(PolicyDenialError):
        def __init__(self, code: int) -> None:
            super().__init__(f"refused ({code})", policy_id="p", interception_point="input")

    assert str(Refusal(7)) == "refused (7)"


def test_a_denial_without_a_reason_has_a_fixed_message():
    @input_policy
    def bare(ctx):
        return Decision.deny()

    with pytest.raises(PolicyDenialError) as denied:
        PolicyEngine(policy_set=PolicySet(input=[bare])).evaluate_input_sync(input_ctx("x"))
    assert denied.value.reason is None
    assert str(denied.value)


def test_escalation_raises_approval_required_with_the_request():
    @tool_call_policy
    def ask_first(ctx):
        return Decision.escalate("money moves")

    engine = PolicyEngine(policy_set=PolicySet(tool_call=[ask_first]))
    with pytest.raises(ApprovalRequired) as asked:
        engine.evaluate_tool_call_sync(tool_call_ctx("pay", {"amount": 5}))
    request = asked.value.request
    assert request["policy_ids"] == ["ask_first"]
    assert request["reasons"] == ["money moves"]
    assert request["interception_point"] == "tool_call"
    assert request["context"]["arguments"] == {"amount": 5}
    assert len(request["action_digest"]) == 64
    assert asked.value.policy_id == "ask_first"

    engine.grant(request["action_digest"], "alice", ttl=60)
    ctx = tool_call_ctx("pay", {"amount": 5})
    assert engine.evaluate_tool_call_sync(ctx) is ctx
    with pytest.raises(ApprovalRequired):
        engine.evaluate_tool_call_sync(tool_call_ctx("pay", {"amount": 5}))
    with pytest.raises(ApprovalRequired):
        engine.evaluate_tool_call_sync(tool_call_ctx("pay", {"amount": 6}))
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        engine.grant(request["action_digest"], "alice", ttl=0)


def test_on_error_deny_and_allow():
    class Broken:
        id = "broken"

        def evaluate(self, ctx):
            raise RuntimeError("database down")

    with pytest.raises(PolicyEvaluationError) as failed:
        PolicyEngine(policy_set=PolicySet(input=[Broken()])).evaluate_input_sync(input_ctx("x"))
    assert failed.value.policy_id == "broken"
    assert failed.value.interception_point == "input"
    assert "RuntimeError: database down" in failed.value.cause
    assert isinstance(failed.value.__cause__, RuntimeError)

    records: List[Dict[str, Any]] = []
    engine = PolicyEngine(
        policy_set=PolicySet(input=[Broken(), no_ssn], on_error="allow"), on_audit=records.append
    )
    ctx = input_ctx("fine")
    assert engine.evaluate_input_sync(ctx) is ctx
    assert [(r["policy_id"], r["decision"]) for r in records] == [
        ("broken", "evaluation_error"),
        ("no_ssn", "allow"),
    ]
    assert "database down" in records[0]["reason"]


def test_async_def_policies_run_in_the_sync_api_and_on_the_callers_loop():
    seen_loops = []

    @input_policy
    async def remembers_loop(ctx):
        seen_loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return Decision.allow()

    engine = PolicyEngine(policy_set=PolicySet(input=[remembers_loop]))
    ctx = input_ctx("x")
    assert engine.evaluate_input_sync(ctx) is ctx

    async def main():
        assert await engine.evaluate_input(ctx) is ctx
        return asyncio.get_running_loop()

    caller_loop = asyncio.run(main())
    assert seen_loops[1] is caller_loop
    assert seen_loops[0] is not caller_loop


def test_policy_ids_of_decorated_functions():
    @input_policy(id="custom")
    def named(ctx):
        return Decision.allow()

    assert no_ssn.id == "no_ssn"
    assert named.id == "custom"
    assert named.point == "input"
    assert named({"x": 1}) == Decision.allow()


def test_approvals_kept_in_redis_reach_every_replica(tmp_path: Path, redis_url: str):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "pay.json").write_text(
        '{"condition": {"field": "tool_name", "equals": "pay"}, "action": "escalate",'
        ' "reason": "money moves"}'
    )
    manifest = tmp_path / "portcullis.yaml"
    manifest.write_text(
        "tool_call:\n  - dsl: rules/pay.json\n"
        f"approvals: {{ store: '{redis_url}', timeout: 5m }}\n"
        f"sessions: {{ store: '{redis_url}', ttl: 1h }}\n"
    )
    # Two replicas of one service: one store.
    first, second = PolicyEngine.from_manifest(manifest), PolicyEngine.from_manifest(manifest)
    with pytest.raises(ApprovalRequired) as asked:
        first.evaluate_tool_call_sync(tool_call_ctx("pay", {"amount": 5}))
    request = asked.value.request
    # The retry on the other replica is the same pending request.
    with pytest.raises(ApprovalRequired) as again:
        second.evaluate_tool_call_sync(tool_call_ctx("pay", {"amount": 5}))
    assert again.value.request["id"] == request["id"]

    first.grant(request["action_digest"], "erin", ttl=60)
    ctx = tool_call_ctx("pay", {"amount": 5})
    assert second.evaluate_tool_call_sync(ctx) is ctx
    # Used once, whichever replica asks next.
    for engine in (first, second):
        with pytest.raises(ApprovalRequired):
            engine.evaluate_tool_call_sync(tool_call_ctx("pay", {"amount": 5}))


def test_from_manifest_with_str_and_path(tmp_path: Path):
    manifest = tmp_path / "portcullis.yaml"
    manifest.write_text(
        f"on_error: deny\n"
        f"input:\n  - dsl: {FIXTURES / 'dsl' / 'input' / 'no_ssn.json'}\n"
        f"tool_call:\n  - rego: {bundle('approved-tools.tar.gz')}\n"
    )
    records: List[Dict[str, Any]] = []
    for path in (manifest, str(manifest)):
        engine = PolicyEngine.from_manifest(path, on_audit=records.append)
        with pytest.raises(PolicyDenialError) as denied:
            engine.evaluate_input_sync(input_ctx("my ssn is 1"))
        assert denied.value.policy_id == "no_ssn"
        with pytest.raises(PolicyDenialError) as denied:
            asyncio.run(engine.evaluate_tool_call(tool_call_ctx("rm")))
        assert denied.value.reason == "Tool is not in the approved list."
        ctx = tool_call_ctx("web_search")
        assert engine.evaluate_tool_call_sync(ctx) is ctx
    assert len(records) == 6


def test_a_manifest_with_problems_names_them(tmp_path: Path):
    manifest = tmp_path / "portcullis.yaml"
    manifest.write_text("input:\n  - dsl: missing.json\nunknown_key: 1\n")
    with pytest.raises(ValueError) as failed:
        PolicyEngine.from_manifest(manifest)
    message = str(failed.value)
    assert "missing.json" in message
    assert "unknown_key" in message
    with pytest.raises(ValueError):
        PolicyEngine.from_manifest(tmp_path / "nope.yaml")


def test_native_dsl_policy_with_a_path_and_its_problems(tmp_path: Path):
    policy = DslInputPolicy("no_ssn", FIXTURES / "dsl" / "input")
    assert policy.id == "no_ssn"
    assert policy.problems == []
    missing = DslInputPolicy("missing", tmp_path)
    assert missing.problems
    engine = PolicyEngine(policy_set=PolicySet(input=[missing]))
    with pytest.raises(PolicyEvaluationError) as failed:
        engine.evaluate_input_sync(input_ctx("x"))
    assert failed.value.policy_id == "missing"


def test_an_engine_without_policies_forwards_everything():
    engine = PolicyEngine()
    ctx = output_ctx("anything")
    assert engine.evaluate_output_sync(ctx) is ctx
    assert engine.evaluate_sync("output", ctx) is ctx
    assert asyncio.run(engine.evaluate("output", ctx)) is ctx
