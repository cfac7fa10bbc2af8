// @portcullis/rego-rest for ESM: the same classes as @portcullis/core's.
export { RegoServerInputPolicy, RegoServerToolCallPolicy, RegoServerOutputPolicy, RegoServerToolResultPolicy } from '@portcullis/core';
