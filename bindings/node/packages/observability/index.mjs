// @portcullis/observability for ESM: the same function as @portcullis/core's.
export { createObservabilityAuditHandler } from '@portcullis/core';
