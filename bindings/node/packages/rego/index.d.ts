// Types of @portcullis/rego: re-exported from @portcullis/core.
export { RegoInputPolicy, RegoToolCallPolicy, RegoOutputPolicy } from '@portcullis/core';
