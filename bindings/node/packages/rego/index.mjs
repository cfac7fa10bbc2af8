// @portcullis/rego for ESM: the same classes as @portcullis/core's.
export { RegoInputPolicy, RegoToolCallPolicy, RegoOutputPolicy, RegoToolResultPolicy } from '@portcullis/core';
