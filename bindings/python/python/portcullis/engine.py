"""The policy engine: :class:`PolicySet` says which policies run at each point,
:class:`PolicyEngine` runs them (in Rust) and returns the context to forward."""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _native
from .errors import ApprovalRequired, PolicyDenialError, PolicyEvaluationError
from .policies import POINTS, FunctionPolicy, NativePolicy, _path
from .types import InputContext, OutputContext, ToolCallContext, ToolResultContext

_log = logging.getLogger("portcullis")

AuditHandler = Callable[[Dict[str, Any]], Any]
"""Takes one audit record (a dict of §5's shape); what it returns is ignored."""


class PolicySet:
    """The policies of each point, in order, and what an evaluation error does.

    ``on_error="deny"`` (the default) fails a call whose policy could not be evaluated with
    :class:`PolicyEvaluationError`; ``"allow"`` skips that policy and goes on.
    """

    def __init__(
        self,
        *,
        input: Sequence[Any] = (),
        tool_call: Sequence[Any] = (),
        output: Sequence[Any] = (),
        tool_result: Sequence[Any] = (),
        on_error: str = "deny",
    ) -> None:
        if on_error not in ("deny", "allow"):
            raise ValueError(f'on_error must be "deny" or "allow", not {on_error!r}')
        self.on_error = on_error
        """``"deny"`` or ``"allow"``."""
        self.input: List[Any] = _policies(input, "input")
        """The input policies."""
        self.tool_call: List[Any] = _policies(tool_call, "tool_call")
        """The tool-call policies."""
        self.tool_result: List[Any] = _policies(tool_result, "tool_result")
        """The tool-result policies."""
        self.output: List[Any] = _policies(output, "output")
        """The output policies."""

    def __repr__(self) -> str:
        counts = ", ".join(f"{point}={len(getattr(self, point))}" for point in POINTS)
        return f"PolicySet({counts}, on_error={self.on_error!r})"


def _policies(policies: Any, point: str) -> List[Any]:
    if isinstance(policies, (str, bytes, dict)) or not isinstance(policies, Iterable):
        raise TypeError(f"PolicySet: {point} must be a list of policies, not {type(policies).__name__}")
    return list(policies)


def _native_set(policy_set: PolicySet) -> "_native.NativePolicySet":
    native = _native.NativePolicySet(policy_set.on_error)
    for point in POINTS:
        for index, policy in enumerate(getattr(policy_set, point)):
            _add(native, point, policy, f"PolicySet.{point}[{index}]")
    return native


def _add(native: "_native.NativePolicySet", point: str, policy: Any, where: str) -> None:
    if isinstance(policy, NativePolicy):
        try:
            native.add_native(point, policy._native)
        except ValueError as error:
            raise TypeError(f"{where} ({policy.id!r}): {error}") from None
        return
    if isinstance(policy, FunctionPolicy):
        if policy.point != point:
            raise TypeError(
                f"{where} ({policy.id!r}) is a {policy.point} policy; it cannot go in {point}"
            )
        native.add_python(point, policy.id, policy.function, policy.deadline)
        return
    evaluate = getattr(policy, "evaluate", None)
    if not callable(evaluate):
        if callable(policy):
            raise TypeError(
                f"{where} is a function, not a policy: decorate it with @{point}_policy"
            )
        raise TypeError(
            f"{where} is not a policy: a policy has an id and an evaluate(ctx) method"
        )
    policy_id = getattr(policy, "id", None)
    if not isinstance(policy_id, str) or not policy_id:
        raise TypeError(f"{where}: a policy's id must be a non-empty string, not {policy_id!r}")
    deadline = getattr(policy, "deadline", None)
    if deadline is not None and not (isinstance(deadline, (int, float)) and deadline > 0):
        raise TypeError(f"{where}.deadline must be a positive number of seconds")
    native.add_python(point, policy_id, evaluate, deadline)


def _audit_plan(on_audit: Optional[AuditHandler]) -> Tuple[bool, Any]:
    """How an engine audits for ``on_audit``: records handed back with each call, or a native
    sink the engine feeds itself."""
    if on_audit is None:
        return False, None
    sink = getattr(on_audit, "_portcullis_sink", None)
    if sink is not None:
        return False, sink
    if not callable(on_audit):
        raise TypeError("on_audit must be a callable taking an audit record")
    return True, None


class PolicyEngine:
    """Runs the policies of each interception point on a context and returns the context to
    forward (the same object when unchanged, a new dict when a policy redacted or changed it).

    Build it once and share it: it is safe to use from many threads and many coroutines.
    ``on_audit`` receives every audit record (a dict) before the call returns or raises; an
    ``on_audit`` that raises is logged (logger ``portcullis``), never the call's failure.

    Each ``evaluate_*`` raises :class:`PolicyDenialError` when a policy denies,
    :class:`PolicyEvaluationError` when one cannot be evaluated (and ``on_error`` is
    ``"deny"``), :class:`ApprovalRequired` when one escalates; ``TypeError`` or ``ValueError``
    for a context that is not a valid one of the point.
    """

    def __init__(
        self,
        policy_set: Optional[PolicySet] = None,
        *,
        on_audit: Optional[AuditHandler] = None,
        _native_engine: Any = None,
    ) -> None:
        keep, sink = _audit_plan(on_audit)
        if _native_engine is None:
            if policy_set is None:
                policy_set = PolicySet()
            if not isinstance(policy_set, PolicySet):
                raise TypeError(f"policy_set must be a PolicySet, not {type(policy_set).__name__}")
            _native_engine = _native.create_engine(_native_set(policy_set), keep, sink)
        self._native = _native_engine
        self._on_audit = on_audit if keep else None

    @classmethod
    def from_manifest(
        cls, path: "str | os.PathLike[str]", *, on_audit: Optional[AuditHandler] = None
    ) -> "PolicyEngine":
        """Loads a manifest (§10: a policy set as files, YAML or JSON) and builds its engine.
        Raises ``ValueError`` naming every problem of the manifest (file, line, column)."""
        keep, sink = _audit_plan(on_audit)
        manifest = os.path.abspath(_path(path, "PolicyEngine.from_manifest: path"))
        try:
            native = _native.engine_from_manifest(manifest, keep, sink)
        except ValueError as error:
            raise ValueError(f"cannot load the manifest {manifest}:\n{error}") from None
        return cls(on_audit=on_audit, _native_engine=native)

    async def evaluate_input(self, ctx: InputContext) -> InputContext:
        """Runs the input policies on ``ctx`` (before the request goes to the model)."""
        return await self._evaluate("input", ctx)

    async def evaluate_tool_call(self, ctx: ToolCallContext) -> ToolCallContext:
        """Runs the tool-call policies on ``ctx`` (before the tool runs)."""
        return await self._evaluate("tool_call", ctx)

    async def evaluate_tool_result(self, ctx: ToolResultContext) -> ToolResultContext:
        """Runs the tool-result policies on ``ctx`` (before the model reads what a tool
        returned)."""
        return await self._evaluate("tool_result", ctx)

    async def evaluate_output(self, ctx: OutputContext) -> OutputContext:
        """Runs the output policies on ``ctx`` (the model's answer)."""
        return await self._evaluate("output", ctx)

    def evaluate_input_sync(self, ctx: InputContext) -> InputContext:
        """:meth:`evaluate_input`, blocking this thread (``async def`` policies run too)."""
        return self._settle(ctx, self._native.evaluate_sync("input", ctx))

    def evaluate_tool_call_sync(self, ctx: ToolCallContext) -> ToolCallContext:
        """:meth:`evaluate_tool_call`, blocking this thread."""
        return self._settle(ctx, self._native.evaluate_sync("tool_call", ctx))

    def evaluate_tool_result_sync(self, ctx: ToolResultContext) -> ToolResultContext:
        """:meth:`evaluate_tool_result`, blocking this thread."""
        return self._settle(ctx, self._native.evaluate_sync("tool_result", ctx))

    def evaluate_output_sync(self, ctx: OutputContext) -> OutputContext:
        """:meth:`evaluate_output`, blocking this thread."""
        return self._settle(ctx, self._native.evaluate_sync("output", ctx))

    def evaluate_sync(self, point: str, ctx: Dict[str, Any]) -> Dict[str, Any]:
        """Runs the policies of ``point`` (its wire name) on ``ctx``, blocking this thread."""
        return self._settle(ctx, self._native.evaluate_sync(point, ctx))

    async def evaluate(self, point: str, ctx: Dict[str, Any]) -> Dict[str, Any]:
        """Runs the policies of ``point`` (its wire name) on ``ctx``."""
        return await self._evaluate(point, ctx)

    def grant(self, action_digest: str, by: str, *, ttl: float = 300.0) -> None:
        """Records a person's approval of the action an :class:`ApprovalRequired` asked about
        (its ``request["action_digest"]``), by ``by``: the same call, retried within ``ttl``
        seconds, proceeds once. A call whose action differs in any byte needs its own."""
        self._native.grant(action_digest, by, ttl)

    async def _evaluate(self, point: str, ctx: Any) -> Any:
        outcome = self._native.evaluate_async(point, ctx)
        if type(outcome) is not tuple:
            outcome = await outcome
        return self._settle(ctx, outcome)

    def _settle(self, ctx: Any, outcome: Tuple[int, Any, Any]) -> Any:
        kind, detail, records = outcome
        if records is not None and self._on_audit is not None:
            _deliver(self._on_audit, records)
        if kind == 0:
            return ctx if detail is None else detail
        if kind == 1:
            # A denial, made by the native layer (which raises it itself when there are no
            # records to deliver first).
            raise detail
        raise _error(kind, detail)

    def __repr__(self) -> str:
        return "<PolicyEngine>"


def _error(kind: int, detail: Any) -> Exception:
    if kind == 2:
        policy_id, point, cause, raised = detail
        error = PolicyEvaluationError(policy_id=policy_id, interception_point=point, cause=cause)
        if raised is not None:
            error.__cause__ = raised
        return error
    return ApprovalRequired(detail)


def _deliver(on_audit: AuditHandler, records: List[Dict[str, Any]]) -> None:
    for record in records:
        try:
            returned = on_audit(record)
            if inspect.isawaitable(returned):
                _log.warning("on_audit returned an awaitable; audit handlers are called synchronously")
                close = getattr(returned, "close", None)
                if callable(close):
                    close()
        except Exception:
            _log.exception("on_audit raised on a record of %r", record.get("policy_id"))


__all__ = ["PolicySet", "PolicyEngine", "AuditHandler"]
