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

from . import decisions, engine, errors, policies
from .decisions import *  # noqa: F403 - the package's names, listed in each module's __all__
from .engine import *  # noqa: F403
from .errors import *  # noqa: F403
from .policies import *  # noqa: F403

__version__ = "0.1.0"
"""The package's version."""

__all__ = ["__version__"]
__all__ += decisions.__all__
__all__ += engine.__all__
__all__ += errors.__all__
__all__ += policies.__all__
