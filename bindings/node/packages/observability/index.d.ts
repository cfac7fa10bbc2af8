// Types of @portcullis/observability: re-exported from @portcullis/core.
export { createObservabilityAuditHandler } from '@portcullis/core';
export type { ObservabilityAuditHandler, ObservabilityOptions } from '@portcullis/core';
