// Types of @portcullis/rego: re-exported from @portcullis/core.
export { RegoInputPolicy, RegoToolCallPolicy, RegoOutputPolicy, RegoToolResultPolicy } from '@portcullis/core';
