"""Audit records exported: OpenTelemetry spans through the Python API (checked with the SDK's
in-memory exporter), and the observability platform's OTLP/HTTP export to a local server."""

from __future__ import annotations

import asyncio
import base64

import pytest
from conftest import input_ctx

from portcullis import Decision, PolicyDenialError, PolicyEngine, PolicySet, input_policy

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from portcullis.observability import ObservabilityAuditHandler  # noqa: E402
from portcullis.otel import SPAN_NAME, OtelAuditHandler  # noqa: E402


@input_policy
def no_ssn(ctx):
    if "SSN" in ctx["messages"][0]["content"]:
        return Decision.deny("No SSNs.")
    return Decision.allow()


@input_policy
def looks(ctx):
    return Decision.audit("looked")


def test_records_become_spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = PolicyEngine(
        policy_set=PolicySet(input=[looks, no_ssn]),
        on_audit=OtelAuditHandler(tracer=provider.get_tracer("test")),
    )
    engine.evaluate_input_sync(input_ctx("hello"))
    with pytest.raises(PolicyDenialError):
        asyncio.run(engine.evaluate_input(input_ctx("my SSN")))

    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == [SPAN_NAME] * 4
    summary = [
        (
            span.attributes["engine.policy_id"],
            span.attributes["engine.decision"],
            span.attributes.get("engine.reason"),
            span.status.status_code,
        )
        for span in spans
    ]
    assert summary == [
        ("looks", "audit", "looked", StatusCode.OK),
        ("no_ssn", "allow", None, StatusCode.OK),
        ("looks", "audit", "looked", StatusCode.OK),
        ("no_ssn", "deny", "No SSNs.", StatusCode.ERROR),
    ]
    assert all(span.attributes["engine.interception_point"] == "input" for span in spans)
    assert all(span.attributes["engine.enforced"] is True for span in spans)
    assert all(span.start_time == span.end_time and span.start_time > 0 for span in spans)


def test_the_global_tracer_provider_is_the_default():
    handler = OtelAuditHandler()
    assert handler.tracer is not None
    with pytest.raises(TypeError):
        OtelAuditHandler(tracer=object())  # type: ignore[arg-type]


def test_the_observability_handler_exports_to_the_platform(json_server):
    server = json_server(lambda path, body: (200, {}))
    handler = ObservabilityAuditHandler(public_key="pk-1", secret_key="sk-1", base_url=server.base_url)
    assert handler.endpoint == f"{server.base_url}/api/public/otel/v1/traces"
    engine = PolicyEngine(policy_set=PolicySet(input=[looks]), on_audit=handler)
    ctx = input_ctx("hello")
    assert engine.evaluate_input_sync(ctx) is ctx
    handler.flush()

    assert server.requests and server.requests[0][0] == "/api/public/otel/v1/traces"
    headers, body = server.raw[0]
    assert headers["authorization"] == "Basic " + base64.b64encode(b"pk-1:sk-1").decode()
    assert SPAN_NAME.encode() in body
    assert b"session.id" in body and b"s-1" in body
    assert b"user.id" in body and b"agent-1" in body


def test_the_observability_handler_reads_the_environment(monkeypatch):
    monkeypatch.setenv("OBS_PUBLIC_KEY", "pk")
    monkeypatch.setenv("OBS_SECRET_KEY", "sk")
    monkeypatch.setenv("OBS_BASE_URL", "http://127.0.0.1:9")
    assert ObservabilityAuditHandler().endpoint == "http://127.0.0.1:9/api/public/otel/v1/traces"
    monkeypatch.delenv("OBS_BASE_URL")
    assert ObservabilityAuditHandler().endpoint.startswith("https://cloud.langfuse.com/")
    monkeypatch.delenv("OBS_SECRET_KEY")
    with pytest.raises(ValueError, match="OBS_SECRET_KEY"):
        ObservabilityAuditHandler()
    with pytest.raises(ValueError, match="give both"):
        ObservabilityAuditHandler(public_key="pk")
    with pytest.raises(TypeError, match="fed by the engine"):
        ObservabilityAuditHandler(public_key="pk", secret_key="sk")({})
