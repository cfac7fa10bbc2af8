// @portcullis/dsl for ESM: the same classes as @portcullis/core's.
export { DslInputPolicy, DslToolCallPolicy, DslOutputPolicy, DslToolResultPolicy } from '@portcullis/core';
