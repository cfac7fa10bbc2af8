'use strict';
// @portcullis/otel: audit records as OpenTelemetry spans, through the application's own
// @opentelemetry/api (a peer dependency), so the spans join its traces and exporters.

const api = require('@opentelemetry/api');

/** The span of each record. */
const SPAN_NAME = 'engine.policy.evaluate';

/** Decisions whose span has status error. */
const FAILED = new Set(['deny', 'evaluation_error']);

/**
 * An audit handler that turns each record into one span named `engine.policy.evaluate`,
 * started and ended at the record's timestamp, with the attributes `engine.policy_id`,
 * `engine.decision`, `engine.interception_point`, `engine.enforced` and `engine.reason` (when
 * there is one); status error for `deny` and `evaluation_error`, ok otherwise.
 * `tracer`: the tracer to use; by default the global tracer provider's `portcullis` tracer.
 */
function createOtelAuditHandler(options = {}) {
  if (options === null || typeof options !== 'object') {
    throw new TypeError('createOtelAuditHandler takes options such as { tracer }');
  }
  const tracer = options.tracer ?? api.trace.getTracer('portcullis');
  if (typeof tracer.startSpan !== 'function') {
    throw new TypeError('createOtelAuditHandler: tracer must be an OpenTelemetry Tracer');
  }
  return function otelAuditHandler(record) {
    const time = new Date(record.timestamp);
    const attributes = {
      'engine.policy_id': record.policy_id,
      'engine.decision': record.decision,
      'engine.interception_point': record.interception_point,
    };
    if (typeof record.enforced === 'boolean') attributes['engine.enforced'] = record.enforced;
    if (record.reason !== undefined && record.reason !== null) attributes['engine.reason'] = record.reason;
    const span = tracer.startSpan(SPAN_NAME, { startTime: time, attributes, kind: api.SpanKind.INTERNAL });
    span.setStatus({ code: FAILED.has(record.decision) ? api.SpanStatusCode.ERROR : api.SpanStatusCode.OK });
    span.end(time);
  };
}

module.exports = { createOtelAuditHandler, SPAN_NAME };
