// @portcullis/otel for ESM: the CommonJS implementation's exports.
import otel from './index.cjs';

export const { createOtelAuditHandler, SPAN_NAME } = otel;
