"""Guardrails for the OpenAI Agents SDK (``openai-agents`` 0.4 or later), each built from a
:class:`~portcullis.PolicyEngine`, so a policy set guards an ``Agent`` in a few lines::

    from agents import Agent, Runner, RunConfig, function_tool
    from portcullis import PolicyEngine
    from portcullis.agents import (guard_tools, input_guardrail, model_input_filter,
                                   output_guardrail)

    engine = PolicyEngine.from_manifest("portcullis.yaml")

    @function_tool
    def fetch(url: str) -> str: ...

    agent = Agent(name="helper", tools=guard_tools(engine, [fetch]),
                  input_guardrails=[input_guardrail(engine)],
                  output_guardrails=[output_guardrail(engine)])
    result = await Runner.run(agent, "hi", run_config=RunConfig(
        call_model_input_filter=model_input_filter(engine)))

What each point does in the SDK:

- ``input`` (:func:`input_guardrail`): a denial trips ``InputGuardrailTripwireTriggered``; the
  guardrail runs before the agent starts (``run_in_parallel=False``), so a denied input never
  reaches the model. A redaction or transform of the input is applied by
  :func:`model_input_filter` (``RunConfig(call_model_input_filter=...)``), which rewrites the
  messages the model is sent on every turn (and raises :class:`~portcullis.PolicyDenialError`
  on a denial).
- ``tool_call`` (:func:`tool_input_guardrail`, before the tool runs): a denial trips
  ``ToolInputGuardrailTripwireTriggered`` and the tool never runs. The SDK cannot change a
  tool's arguments, so a redaction or transform of them also keeps the tool from running: the
  model is told the call was refused (fail closed).
- ``tool_result`` (:func:`tool_output_guardrail`, on the tool's output): a denial trips
  ``ToolOutputGuardrailTripwireTriggered``; a redaction or transform replaces what the model
  reads by the changed ``content``.
- ``output`` (:func:`output_guardrail`): a denial trips ``OutputGuardrailTripwireTriggered``.
  The SDK cannot change an agent's final output from a guardrail: a changed output is in the
  guardrail result's ``output_info["forwarded"]``.

An approval request (``escalate``) trips like a denial (nobody approved). An evaluation error
(``on_error="deny"``) trips too. Every guardrail's ``output_info`` is a dict with
``decision`` (``allow``, ``changed``, ``deny``, ``approval_required`` or ``evaluation_error``),
``policy_id`` and ``reason`` where they apply, and ``forwarded`` (the context to forward).

``metadata`` (a dict, or a callable taking the SDK's run context and returning one) gives the
contexts' ``metadata``; by default ``agent_id`` is the agent's name, ``session_id`` is empty
and ``timestamp`` is now.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

try:
    from agents import (
        GuardrailFunctionOutput,
        InputGuardrail,
        OutputGuardrail,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
    )
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "portcullis.agents needs the OpenAI Agents SDK: pip install 'portcullis[agents]'"
    ) from error

from .engine import PolicyEngine
from .errors import ApprovalRequired, PolicyDenialError, PolicyEvaluationError

Metadata = Union[Mapping[str, Any], Callable[[Any], Mapping[str, Any]], None]
"""The contexts' metadata: a dict, or a callable taking the SDK's run context."""

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _metadata(metadata: Metadata, run_context: Any, agent: Any) -> Dict[str, Any]:
    given = metadata(run_context) if callable(metadata) else metadata
    values: Dict[str, Any] = {
        "agent_id": str(getattr(agent, "name", "") or ""),
        "session_id": "",
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    values.update(given or {})
    return values


def _text(content: Any) -> Optional[str]:
    """The text of a message's content: a string, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, Mapping)]
        return "\n".join(text for text in texts if isinstance(text, str))
    return None


def _messages(items: Union[str, List[Any]]) -> Tuple[List[Dict[str, str]], List[int]]:
    """The SDK's input as §1 messages, with the index of the item each came from."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}], [-1]
    messages, origins = [], []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        role = _ROLES.get(item.get("role", "user" if "content" in item else ""))
        text = _text(item.get("content")) if item.get("type", "message") == "message" else None
        if role is None or text is None:
            continue
        messages.append({"role": role, "content": text})
        origins.append(index)
    return messages, origins


async def _judge(engine: PolicyEngine, point: str, ctx: Dict[str, Any]) -> Dict[str, Any]:
    """The engine's verdict on ``ctx``, as a guardrail's ``output_info``."""
    try:
        forwarded = await engine.evaluate(point, ctx)
    except PolicyDenialError as denial:
        return {"decision": "deny", "policy_id": denial.policy_id, "reason": denial.reason}
    except ApprovalRequired as asked:
        return {"decision": "approval_required", "policy_id": asked.policy_id, "request": asked.request}
    except PolicyEvaluationError as failed:
        return {"decision": "evaluation_error", "policy_id": failed.policy_id, "reason": failed.cause}
    return {"decision": "allow" if forwarded is ctx else "changed", "forwarded": forwarded}


def _tripped(info: Mapping[str, Any]) -> bool:
    return info["decision"] not in ("allow", "changed")


def input_guardrail(
    engine: PolicyEngine, *, metadata: Metadata = None, name: str = "portcullis_input"
) -> InputGuardrail[Any]:
    """An input guardrail running the engine's ``input`` policies on the agent's input, before
    the agent starts: a denial trips ``InputGuardrailTripwireTriggered``."""

    async def guard(run_context: Any, agent: Any, items: Any) -> GuardrailFunctionOutput:
        messages, _ = _messages(items)
        ctx = {"messages": messages, "metadata": _metadata(metadata, run_context, agent)}
        info = await _judge(engine, "input", ctx)
        return GuardrailFunctionOutput(output_info=info, tripwire_triggered=_tripped(info))

    return InputGuardrail(guardrail_function=guard, name=name, run_in_parallel=False)


def model_input_filter(engine: PolicyEngine, *, metadata: Metadata = None) -> Callable[[Any], Any]:
    """A ``RunConfig(call_model_input_filter=...)`` that runs the engine's ``input`` policies on
    the messages of every model call and sends the model the redacted or transformed ones.
    Raises :class:`~portcullis.PolicyDenialError` (or the engine's other exceptions) when
    the input may not go to the model."""
    from agents.run_config import ModelInputData

    async def apply(call: Any) -> Any:
        data = call.model_data
        items = list(data.input)
        messages, origins = _messages(items)
        ctx = {"messages": messages, "metadata": _metadata(metadata, call.context, call.agent)}
        forwarded = await engine.evaluate_input(ctx)
        if forwarded is ctx:
            return data
        changed = forwarded["messages"]
        if len(changed) != len(messages):
            raise PolicyEvaluationError(
                policy_id="portcullis.agents",
                interception_point="input",
                cause="a policy removed or added messages, which the model input cannot follow",
            )
        for origin, before, after in zip(origins, messages, changed):
            if before["content"] != after["content"]:
                items[origin] = {**items[origin], "content": after["content"]}
        return ModelInputData(input=items, instructions=data.instructions)

    return apply


def output_guardrail(
    engine: PolicyEngine, *, metadata: Metadata = None, name: str = "portcullis_output"
) -> OutputGuardrail[Any]:
    """An output guardrail running the engine's ``output`` policies on the agent's final
    output: a denial trips ``OutputGuardrailTripwireTriggered``."""

    async def guard(run_context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        text = output if isinstance(output, str) else _dump(output)
        ctx = {
            "response": {"role": "assistant", "content": text},
            "metadata": _metadata(metadata, run_context, agent),
        }
        info = await _judge(engine, "output", ctx)
        return GuardrailFunctionOutput(output_info=info, tripwire_triggered=_tripped(info))

    return OutputGuardrail(guardrail_function=guard, name=name)


def _dump(value: Any) -> str:
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def _arguments(raw: str) -> Dict[str, Any]:
    try:
        arguments = json.loads(raw or "{}")
    except ValueError:
        return {"_raw": raw}
    return arguments if isinstance(arguments, dict) else {"_value": arguments}


def _tool_verdict(info: Dict[str, Any], changed: Callable[[], str]) -> ToolGuardrailFunctionOutput:
    """A tool guardrail's answer: trip (the SDK raises), send the model ``changed()`` instead
    of the tool's call or result, or let it through."""
    if _tripped(info):
        return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
    if info["decision"] == "changed":
        return ToolGuardrailFunctionOutput.reject_content(changed(), output_info=info)
    return ToolGuardrailFunctionOutput.allow(output_info=info)


def tool_input_guardrail(
    engine: PolicyEngine, *, metadata: Metadata = None, name: str = "portcullis_tool_call"
) -> ToolInputGuardrail[Any]:
    """A tool input guardrail running the engine's ``tool_call`` policies before the tool
    runs: a denial trips ``ToolInputGuardrailTripwireTriggered`` and the tool never runs."""

    async def guard(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        tool = data.context
        ctx = {
            "tool_name": tool.tool_name,
            "arguments": _arguments(tool.tool_arguments),
            "calling_message": {"role": "assistant", "content": f"{tool.tool_name}({tool.tool_arguments})"},
            "metadata": _metadata(metadata, tool, data.agent),
        }
        info = await _judge(engine, "tool_call", ctx)
        return _tool_verdict(
            info,
            lambda: f"The call to {tool.tool_name} was refused: a policy changed its arguments, "
            "which cannot be applied here.",
        )

    return ToolInputGuardrail(guardrail_function=guard, name=name)


def tool_output_guardrail(
    engine: PolicyEngine, *, metadata: Metadata = None, name: str = "portcullis_tool_result"
) -> ToolOutputGuardrail[Any]:
    """A tool output guardrail running the engine's ``tool_result`` policies on what the tool
    returned, before the model reads it: a denial trips ``ToolOutputGuardrailTripwireTriggered``;
    a redaction or transform replaces what the model reads by the changed content."""

    async def guard(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        tool = data.context
        output = data.output
        ctx: Dict[str, Any] = {
            "tool_name": tool.tool_name,
            "arguments": _arguments(tool.tool_arguments),
            "content": output if isinstance(output, str) else _dump(output),
            "is_error": False,
            "metadata": _metadata(metadata, tool, data.agent),
        }
        info = await _judge(engine, "tool_result", ctx)
        return _tool_verdict(info, lambda: str(info["forwarded"]["content"]))

    return ToolOutputGuardrail(guardrail_function=guard, name=name)


def guard_tools(engine: PolicyEngine, tools: Iterable[Any], *, metadata: Metadata = None) -> List[Any]:
    """Adds :func:`tool_input_guardrail` and :func:`tool_output_guardrail` of ``engine`` to
    each function tool of ``tools`` (after the guardrails it already has) and returns them as a
    list: ``Agent(tools=guard_tools(engine, [search, fetch]))``."""
    before = tool_input_guardrail(engine, metadata=metadata)
    after = tool_output_guardrail(engine, metadata=metadata)
    guarded = []
    for tool in tools:
        if not hasattr(tool, "tool_input_guardrails") or not hasattr(tool, "tool_output_guardrails"):
            raise TypeError(
                f"guard_tools: {tool!r} is not a function tool (make it one with @function_tool)"
            )
        tool.tool_input_guardrails = [*(tool.tool_input_guardrails or []), before]
        tool.tool_output_guardrails = [*(tool.tool_output_guardrails or []), after]
        guarded.append(tool)
    return guarded


__all__ = [
    "guard_tools",
    "input_guardrail",
    "model_input_filter",
    "output_guardrail",
    "tool_input_guardrail",
    "tool_output_guardrail",
]
