"""Audit records as OpenTelemetry spans, through the application's own OpenTelemetry API
(``opentelemetry-api``), so the spans join its traces and exporters (§7.4)::

    from portcullis.otel import OtelAuditHandler
    engine = PolicyEngine(policy_set=..., on_audit=OtelAuditHandler())
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Optional

try:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
except ImportError as error:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "portcullis.otel needs the OpenTelemetry API: pip install 'portcullis[otel]'"
    ) from error

SPAN_NAME = "engine.policy.evaluate"
"""The name of each record's span."""

_FAILED = ("deny", "evaluation_error")


def _nanoseconds(timestamp: str) -> Optional[int]:
    """An RFC 3339 timestamp (``2026-01-01T00:00:00.123Z``) as nanoseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    whole = int(moment.replace(microsecond=0).timestamp())
    return whole * 1_000_000_000 + moment.microsecond * 1_000


class OtelAuditHandler:
    """An audit handler (give it to :class:`~portcullis.PolicyEngine` as ``on_audit``) that
    turns each record into one span named ``engine.policy.evaluate``, started and ended at the
    record's timestamp, with the attributes ``engine.policy_id``, ``engine.decision``,
    ``engine.interception_point``, ``engine.enforced`` and ``engine.reason`` (when there is
    one); status error for ``deny`` and ``evaluation_error``, ok otherwise.

    ``tracer``: the tracer to use; by default the global tracer provider's ``portcullis``
    tracer (resolved when a span is made, so a provider set later is used).
    """

    def __init__(self, tracer: Optional[Tracer] = None) -> None:
        if tracer is not None and not callable(getattr(tracer, "start_span", None)):
            raise TypeError("OtelAuditHandler: tracer must be an OpenTelemetry Tracer")
        self.tracer: Tracer = tracer if tracer is not None else trace.get_tracer("portcullis")
        """The tracer spans are made with."""

    def __call__(self, record: Mapping[str, Any]) -> None:
        """Makes the span of ``record``."""
        attributes = {
            "engine.policy_id": str(record.get("policy_id", "")),
            "engine.decision": str(record.get("decision", "")),
            "engine.interception_point": str(record.get("interception_point", "")),
        }
        enforced = record.get("enforced")
        if isinstance(enforced, bool):
            attributes["engine.enforced"] = enforced  # type: ignore[assignment]
        reason = record.get("reason")
        if reason is not None:
            attributes["engine.reason"] = str(reason)
        time = _nanoseconds(str(record.get("timestamp", "")))
        span = self.tracer.start_span(
            SPAN_NAME, kind=SpanKind.INTERNAL, attributes=attributes, start_time=time
        )
        failed = record.get("decision") in _FAILED
        span.set_status(Status(StatusCode.ERROR if failed else StatusCode.OK))
        span.end(end_time=time)


__all__ = ["OtelAuditHandler", "SPAN_NAME"]
