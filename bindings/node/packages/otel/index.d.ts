// Types of @portcullis/otel.
import type { Tracer } from '@opentelemetry/api';
import type { AuditHandler } from '@portcullis/core';

/** Options of {@link createOtelAuditHandler}. */
export interface OtelAuditHandlerOptions {
  /** The tracer spans are started with; by default the global tracer provider's `portcullis` tracer. */
  tracer?: Tracer;
}

/** The name of every span: `engine.policy.evaluate`. */
export declare const SPAN_NAME: 'engine.policy.evaluate';

/**
 * An audit handler that turns each record into one `engine.policy.evaluate` span at the
 * record's timestamp, with the attributes `engine.policy_id`, `engine.decision`,
 * `engine.interception_point`, `engine.enforced` and `engine.reason` (when present); status
 * error for `deny` and `evaluation_error`. Give it as the engine's `onAudit`.
 */
export declare function createOtelAuditHandler(options?: OtelAuditHandlerOptions): AuditHandler;
