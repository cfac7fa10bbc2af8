// Types of @portcullis/http: re-exported from @portcullis/core.
export { HttpInputPolicy, HttpToolCallPolicy, HttpOutputPolicy, HttpToolResultPolicy } from '@portcullis/core';
/** How to reach the server: { baseUrl }, and optionally `timeoutMs` and `headers`. */
export type { ClientOptions as HttpClientOptions } from '@portcullis/core';
