// @portcullis/rego-rest for ESM: the same classes as @portcullis/core's.
export { RegoServerInputPolicy, RegoServerToolCallPolicy, RegoServerOutputPolicy } from '@portcullis/core';
