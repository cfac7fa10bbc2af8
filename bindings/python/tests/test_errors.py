"""Bad input of every kind gets a clear exception; nothing crashes the interpreter."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from conftest import FIXTURES, input_ctx, tool_call_ctx

from portcullis import (
    Decision,
    DslInputPolicy,
    PolicyEngine,
    PolicyEvaluationError,
    PolicySet,
    input_policy,
    tool_call_policy,
)


def engine_returning(value: Any) -> PolicyEngine:
    class Returns:
        id = "returns"

        def evaluate(self, ctx):
            return value

    return PolicyEngine(policy_set=PolicySet(input=[Returns()]))


@pytest.mark.parametrize(
    "garbage, described",
    [
        (None, "returned null"),
        (42, "returned 42"),
        ("allow", 'returned "allow"'),
        ({"decision": "maybe"}, '{"decision":"maybe"}'),
        ({"decision": "redact", "redactions": []}, "not a decision"),
        (object(), "returned a object"),
        ({"decision": "allow", "x": {1, 2}}, "x: a set is not JSON"),
    ],
)
def test_a_policy_returning_garbage_is_an_evaluation_error(garbage, described):
    with pytest.raises(PolicyEvaluationError) as failed:
        engine_returning(garbage).evaluate_input_sync(input_ctx("x"))
    assert failed.value.policy_id == "returns"
    assert described in failed.value.cause


def test_a_redaction_of_a_missing_field_is_an_evaluation_error():
    engine = engine_returning(Decision.redact([{"field": "messages.7.content", "strategy": "mask"}]))
    with pytest.raises(PolicyEvaluationError):
        engine.evaluate_input_sync(input_ctx("x"))


def test_policies_that_raise_sync_and_async():
    @input_policy
    def raises(ctx):
        raise ValueError("bad value")

    @input_policy
    async def raises_later(ctx):
        await asyncio.sleep(0)
        raise LookupError("not found")

    for policy, kind in ((raises, ValueError), (raises_later, LookupError)):
        engine = PolicyEngine(policy_set=PolicySet(input=[policy]))
        with pytest.raises(PolicyEvaluationError) as failed:
            engine.evaluate_input_sync(input_ctx("x"))
        assert isinstance(failed.value.__cause__, kind)
        with pytest.raises(PolicyEvaluationError) as failed:
            asyncio.run(engine.evaluate_input(input_ctx("x")))
        assert isinstance(failed.value.__cause__, kind)


def test_a_policy_raising_base_exceptions_is_still_an_evaluation_error():
    @input_policy
    def exits(ctx):
        raise SystemExit(3)

    with pytest.raises(PolicyEvaluationError) as failed:
        PolicyEngine(policy_set=PolicySet(input=[exits])).evaluate_input_sync(input_ctx("x"))
    assert isinstance(failed.value.__cause__, SystemExit)


def self_containing() -> Any:
    ctx = input_ctx("x")
    ctx["metadata"]["loop"] = ctx["metadata"]
    return ctx


def deeply_nested() -> Any:
    ctx = input_ctx("x")
    value: Any = "bottom"
    for _ in range(100_000):
        value = [value]
    ctx["metadata"]["deep"] = value
    return ctx


@pytest.mark.parametrize(
    "ctx, error, message",
    [
        (None, TypeError, "must be a dict, not NoneType"),
        ([], TypeError, "must be a dict, not list"),
        ("hello", TypeError, "must be a dict"),
        ({}, ValueError, "not a valid input context"),
        ({"messages": "x", "metadata": {}}, ValueError, "not a valid input context"),
        ({"messages": [{"role": "robot", "content": "x"}], "metadata": input_ctx()["metadata"]}, ValueError, "messages.0.role: unknown variant `robot`"),
        ({"messages": [{"role": "user", "content": 5}], "metadata": input_ctx()["metadata"]}, ValueError, "messages.0.content: invalid type: integer `5`"),
        ({"messages": [], "metadata": {"agent_id": "a", "timestamp": "t"}}, ValueError, "metadata: missing field `session_id`"),
        ({**input_ctx("x"), "mood": "happy"}, ValueError, "unknown field `mood`"),
        ({"messages": [{"role": "user", "content": "\ud800"}], "metadata": input_ctx()["metadata"]}, ValueError, "messages.0.content: a string that is not valid Unicode"),
        ({"messages": [{"role": "user", "content": "x"}], "metadata": {**input_ctx()["metadata"], "\udfff": 1}}, ValueError, "a key that is not valid Unicode"),
        ({**input_ctx("x"), 1: "int key"}, ValueError, "a key of type int"),
        ({**input_ctx("x"), "metadata": {**input_ctx()["metadata"], "n": math.nan}}, ValueError, "not finite"),
        ({**input_ctx("x"), "metadata": {**input_ctx()["metadata"], "n": 2**70}}, ValueError, "too large"),
        ({**input_ctx("x"), "metadata": {**input_ctx()["metadata"], "b": b"bytes"}}, ValueError, "metadata.b: a bytes is not JSON"),
        (self_containing(), ValueError, "nested deeper"),
        (deeply_nested(), ValueError, "nested deeper"),
    ],
)
def test_malformed_contexts_raise_clear_errors(ctx, error, message):
    @input_policy
    def allow(c):
        return Decision.allow()

    engine = PolicyEngine(policy_set=PolicySet(input=[allow]))
    with pytest.raises(error) as raised:
        engine.evaluate_input_sync(ctx)
    assert message in str(raised.value)
    with pytest.raises(error):
        asyncio.run(engine.evaluate_input(ctx))


def test_strings_tuples_and_subclasses_cross_as_json():
    class Tagged(str):
        pass

    seen = []

    @input_policy
    def keep(c):
        seen.append(c)
        return Decision.allow()

    engine = PolicyEngine(policy_set=PolicySet(input=[keep]))
    text = "naïve 日本 \U0001f600 " + "x" * 5000
    ctx = {
        "messages": ({"role": Tagged("user"), "content": text},),
        "metadata": {**input_ctx()["metadata"], "tags": ("a", 1, 2.5, True, None)},
    }
    assert engine.evaluate_input_sync(ctx) is ctx
    assert seen[-1]["messages"][0]["content"] == text
    assert seen[-1]["metadata"]["tags"] == ["a", 1, 2.5, True, None]


def test_a_context_of_another_point_is_refused():
    engine = PolicyEngine()
    with pytest.raises(ValueError, match="not a valid tool_call context"):
        engine.evaluate_tool_call_sync(input_ctx("x"))
    with pytest.raises(ValueError, match="unknown interception point"):
        engine.evaluate_sync("nowhere", input_ctx("x"))


def test_policy_sets_refuse_what_is_not_a_policy():
    @tool_call_policy
    def wrong_point(ctx):
        return Decision.allow()

    def undecorated(ctx):
        return Decision.allow()

    class NoId:
        def evaluate(self, ctx):
            return Decision.allow()

    with pytest.raises(TypeError, match="is a tool_call policy; it cannot go in input"):
        PolicyEngine(policy_set=PolicySet(input=[wrong_point]))
    with pytest.raises(TypeError, match="decorate it with @input_policy"):
        PolicyEngine(policy_set=PolicySet(input=[undecorated]))
    with pytest.raises(TypeError, match="id must be a non-empty string"):
        PolicyEngine(policy_set=PolicySet(input=[NoId()]))
    with pytest.raises(TypeError, match="not a policy"):
        PolicyEngine(policy_set=PolicySet(input=[42]))
    with pytest.raises(TypeError, match="cannot go in output"):
        PolicyEngine(policy_set=PolicySet(output=[DslInputPolicy("no_ssn", FIXTURES / "dsl" / "input")]))
    with pytest.raises(TypeError, match="must be a list"):
        PolicySet(input=wrong_point)
    with pytest.raises(ValueError, match='on_error must be "deny" or "allow"'):
        PolicySet(on_error="maybe")
    with pytest.raises(TypeError):
        PolicySet(inputs=[])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="policy_set must be a PolicySet"):
        PolicyEngine(policy_set={"input": []})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_audit must be a callable"):
        PolicyEngine(on_audit=42)  # type: ignore[arg-type]


def test_native_constructors_refuse_bad_arguments(tmp_path):
    from portcullis import HttpInputPolicy, RegoInputPolicy, RegoServerInputPolicy

    with pytest.raises(TypeError, match="id must be a non-empty string"):
        DslInputPolicy("", tmp_path)
    with pytest.raises(TypeError, match="must be a str or a pathlib.Path"):
        DslInputPolicy("x", 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot load the Rego bundle"):
        RegoInputPolicy("x", tmp_path / "missing.tar.gz")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a bundle")
    with pytest.raises(ValueError, match="cannot load the Rego bundle"):
        RegoInputPolicy("x", junk)
    with pytest.raises(ValueError, match="invalid HTTP policy"):
        HttpInputPolicy("x", "not a url")
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        HttpInputPolicy("x", "http://127.0.0.1:1", timeout=-1)
    with pytest.raises(ValueError, match="invalid Rego server policy"):
        RegoServerInputPolicy("x", "http://127.0.0.1:1", "")


def test_an_on_audit_that_raises_is_logged_not_the_calls_failure(caplog):
    def on_audit(record):
        raise RuntimeError("audit sink down")

    @input_policy
    def allow(ctx):
        return Decision.allow()

    engine = PolicyEngine(policy_set=PolicySet(input=[allow]), on_audit=on_audit)
    ctx = input_ctx("x")
    assert engine.evaluate_input_sync(ctx) is ctx
    assert "on_audit raised" in caplog.text


def test_a_policy_calling_the_sync_api_inside_an_evaluation_fails_cleanly():
    inner = PolicyEngine()

    @input_policy
    def nested(ctx):
        inner.evaluate_input_sync(ctx)
        return Decision.allow()

    engine = PolicyEngine(policy_set=PolicySet(input=[nested]))
    with pytest.raises(PolicyEvaluationError) as failed:
        engine.evaluate_input_sync(input_ctx("x"))
    assert "cannot run inside another evaluation" in failed.value.cause


def test_the_async_api_outside_a_loop_says_so():
    engine = PolicyEngine()
    coroutine = engine.evaluate_input(input_ctx("x"))
    with pytest.raises(RuntimeError, match="running asyncio event loop"):
        coroutine.send(None)


def test_a_deadline_fails_a_policy_that_never_finishes():
    class Hangs:
        id = "hangs"
        deadline = 0.05

        async def evaluate(self, ctx):
            await asyncio.Event().wait()

    engine = PolicyEngine(policy_set=PolicySet(input=[Hangs()]))
    with pytest.raises(PolicyEvaluationError) as failed:
        asyncio.run(engine.evaluate_input(input_ctx("x")))
    assert failed.value.policy_id == "hangs"
    with pytest.raises(PolicyEvaluationError):
        engine.evaluate_input_sync(input_ctx("x"))
    with pytest.raises(TypeError, match="deadline must be a positive number"):
        Hangs.deadline = -1
        PolicyEngine(policy_set=PolicySet(input=[Hangs()]))


def test_tool_call_contexts_check_nesting_of_arguments():
    deep: Any = 1
    for _ in range(200):
        deep = {"a": deep}
    with pytest.raises(ValueError, match="nested deeper"):
        PolicyEngine().evaluate_tool_call_sync(tool_call_ctx("t", {"deep": deep}))


def test_a_policy_past_its_deadline_is_cancelled_on_its_loop():
    async def main():
        cancelled = asyncio.Event()

        class Hangs:
            id = "hangs"
            deadline = 0.05

            async def evaluate(self, ctx):
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.set()
                    raise

        engine = PolicyEngine(policy_set=PolicySet(input=[Hangs()]))
        with pytest.raises(PolicyEvaluationError):
            await engine.evaluate_input(input_ctx("x"))
        await asyncio.wait_for(cancelled.wait(), 30)

    asyncio.run(main())
