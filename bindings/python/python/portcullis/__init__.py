"""Portcullis: an embeddable policy engine for LLM agents, in process, over the Rust engine.

Build one :class:`PolicyEngine` from a :class:`PolicySet` (or a manifest with
:meth:`PolicyEngine.from_manifest`) and call it at the agent's interception points::

    from portcullis import Decision, PolicyEngine, PolicySet, input_policy

    @input_policy
    def no_ssn(ctx):
        if any("SSN" in m["content"] for m in ctx["messages"]):
            return Decision.deny("No social security numbers.")
        return Decision.allow()

    engine = PolicyEngine(policy_set=PolicySet(input=[no_ssn]))
    forwarded = engine.evaluate_input_sync(ctx)      # or: await engine.evaluate_input(ctx)

Submodules: :mod:`portcullis.otel` (audit records as OpenTelemetry spans),
:mod:`portcullis.observability` (an observability platform over OTLP/HTTP),
:mod:`portcullis.agents` (guardrails for the OpenAI Agents SDK), :mod:`portcullis.types`
(``TypedDict``s of contexts and records).
"""

from .decisions import Decision, append, mask, prepend, remove, replace, set_field
from .engine import AuditHandler, PolicyEngine, PolicySet
from .errors import ApprovalRequired, PolicyDenialError, PolicyEvaluationError, PortcullisError
from .policies import (
    DslInputPolicy,
    DslOutputPolicy,
    DslToolCallPolicy,
    DslToolResultPolicy,
    FunctionPolicy,
    HttpInputPolicy,
    HttpOutputPolicy,
    HttpToolCallPolicy,
    HttpToolResultPolicy,
    NativePolicy,
    RegoInputPolicy,
    RegoOutputPolicy,
    RegoServerInputPolicy,
    RegoServerOutputPolicy,
    RegoServerToolCallPolicy,
    RegoServerToolResultPolicy,
    RegoToolCallPolicy,
    RegoToolResultPolicy,
    input_policy,
    output_policy,
    tool_call_policy,
    tool_result_policy,
)

__version__ = "0.1.0"
"""The package's version."""

__all__ = [
    "PolicyEngine",
    "PolicySet",
    "AuditHandler",
    "Decision",
    "mask",
    "replace",
    "remove",
    "set_field",
    "prepend",
    "append",
    "PortcullisError",
    "PolicyDenialError",
    "PolicyEvaluationError",
    "ApprovalRequired",
    "FunctionPolicy",
    "NativePolicy",
    "input_policy",
    "tool_call_policy",
    "tool_result_policy",
    "output_policy",
    "DslInputPolicy",
    "DslToolCallPolicy",
    "DslToolResultPolicy",
    "DslOutputPolicy",
    "RegoInputPolicy",
    "RegoToolCallPolicy",
    "RegoToolResultPolicy",
    "RegoOutputPolicy",
    "RegoServerInputPolicy",
    "RegoServerToolCallPolicy",
    "RegoServerToolResultPolicy",
    "RegoServerOutputPolicy",
    "HttpInputPolicy",
    "HttpToolCallPolicy",
    "HttpToolResultPolicy",
    "HttpOutputPolicy",
]
