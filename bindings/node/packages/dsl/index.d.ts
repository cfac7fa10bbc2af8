// Types of @portcullis/dsl: re-exported from @portcullis/core.
export { DslInputPolicy, DslToolCallPolicy, DslOutputPolicy, DslToolResultPolicy } from '@portcullis/core';
