// @portcullis/rego for ESM: the same classes as @portcullis/core's.
export { RegoInputPolicy, RegoToolCallPolicy, RegoOutputPolicy } from '@portcullis/core';
