// Types of @portcullis/rego-rest: re-exported from @portcullis/core.
export { RegoServerInputPolicy, RegoServerToolCallPolicy, RegoServerOutputPolicy, RegoServerToolResultPolicy } from '@portcullis/core';
/** How to reach the server: { baseUrl }, and optionally `timeoutMs` and `headers`. */
export type { ClientOptions as RegoServerClientOptions } from '@portcullis/core';
