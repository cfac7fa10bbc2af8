// @portcullis/http for ESM: the same classes as @portcullis/core's.
export { HttpInputPolicy, HttpToolCallPolicy, HttpOutputPolicy, HttpToolResultPolicy } from '@portcullis/core';
