// @portcullis/otel: each audit record becomes an engine.policy.evaluate span of the given tracer.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { PolicyEngine } from '@portcullis/core';
import { createOtelAuditHandler } from '@portcullis/otel';

import { input } from './helpers.mjs';

test('createOtelAuditHandler({ tracer }) makes one span per decision', async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const engine = new PolicyEngine({
    policySet: {
      input: [
        { id: 'ok', evaluate: () => ({ decision: 'allow' }) },
        { id: 'no', evaluate: () => ({ decision: 'deny', reason: 'not today' }) },
      ],
    },
    onAudit: createOtelAuditHandler({ tracer: provider.getTracer('test') }),
  });
  await assert.rejects(engine.evaluateInput(input('hi')), { name: 'PolicyDenialError' });
  const spans = exporter.getFinishedSpans();
  assert.deepEqual(spans.map((span) => span.name), ['engine.policy.evaluate', 'engine.policy.evaluate']);
  assert.deepEqual(spans[0].attributes, {
    'engine.policy_id': 'ok',
    'engine.decision': 'allow',
    'engine.interception_point': 'input',
    'engine.enforced': true,
  });
  assert.equal(spans[0].status.code, SpanStatusCode.OK);
  assert.equal(spans[1].attributes['engine.reason'], 'not today');
  assert.equal(spans[1].status.code, SpanStatusCode.ERROR);
});

test('without a tracer the global tracer provider is used, and bad options are refused', () => {
  const handler = createOtelAuditHandler();
  // The global provider is a no-op until one is registered: the handler still runs.
  handler({ policy_id: 'p', decision: 'allow', interception_point: 'input', timestamp: new Date().toISOString(), enforced: true });
  assert.throws(() => createOtelAuditHandler({ tracer: {} }), /must be an OpenTelemetry Tracer/);
});
