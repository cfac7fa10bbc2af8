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
  DslToolResultPolicy,
  RegoInputPolicy,
  RegoToolCallPolicy,
  RegoOutputPolicy,
  RegoToolResultPolicy,
  RegoServerInputPolicy,
  RegoServerToolCallPolicy,
  RegoServerOutputPolicy,
  RegoServerToolResultPolicy,
  HttpInputPolicy,
  HttpToolCallPolicy,
  HttpOutputPolicy,
  HttpToolResultPolicy,
} = core;

export default core;
