// ESM entry of @portcullis/core: the CommonJS implementation's exports, by name (one module
// instance, so `instanceof` holds whichever way a package was imported).
import core from './index.cjs';

export const {
  PolicyEngine,
  PolicyDenialError,
  PolicyEvaluationError,
  ApprovalRequiredError,
  NativePolicy,
  createObservabilityAuditHandler,
  DslInputPolicy,
  DslToolCallPolicy,
  DslOutputPolicy,
  RegoInputPolicy,
  RegoToolCallPolicy,
  RegoOutputPolicy,
  RegoServerInputPolicy,
  RegoServerToolCallPolicy,
  RegoServerOutputPolicy,
  HttpInputPolicy,
  HttpToolCallPolicy,
  HttpOutputPolicy,
} = core;

export default core;
