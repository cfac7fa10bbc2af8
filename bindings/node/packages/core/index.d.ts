// Types of @portcullis/core. Contexts, decisions and audit records are the JSON shapes of the
// Portcullis contract (snake_case keys), as the seed's TypeScript packages name them.

/** The interception points' wire names. */
export type InterceptionPoint = 'input' | 'tool_call' | 'output' | 'tool_result';

/** Who wrote a message. */
export type Role = 'system' | 'user' | 'assistant';

/** One message of a conversation. */
export interface Message {
  role: Role;
  content: string;
}

/** Metadata of every context: the three keys below, and any other keys, kept as they came. */
export interface Metadata {
  agent_id: string;
  session_id: string;
  /** RFC 3339, for example `2026-11-22T05:30:17.123Z`. */
  timestamp: string;
  [key: string]: unknown;
}

/** What input policies see: the messages about to be sent to the model. */
export interface InputContext {
  messages: Message[];
  metadata: Metadata;
}

/** What tool-call policies see: the tool the model wants to run. */
export interface ToolCallContext {
  tool_name: string;
  arguments: Record<string, unknown>;
  /** The assistant message that asked for the call. */
  calling_message: Message;
  metadata: Metadata;
}

/** What output policies see: the model's answer. */
export interface OutputContext {
  response: Message;
  metadata: Metadata;
}

/**
 * What tool-result policies see: what a tool returned, before the model reads it (the main
 * road of indirect prompt injection).
 */
export interface ToolResultContext {
  /** The tool that ran (`"unknown"` when the call it answers cannot be found). */
  tool_name: string;
  /** The arguments it ran with (`{}` when absent). */
  arguments?: Record<string, unknown>;
  /** The result's text: its text blocks joined by newlines. */
  content: string;
  /** The result's structured form, when the tool gave one. */
  structured?: unknown;
  /** Whether the tool reported an error (default `false`; anything but a boolean is refused). */
  is_error?: boolean;
  metadata: Metadata;
}

/** Any context. */
export type PolicyContext = InputContext | ToolCallContext | OutputContext | ToolResultContext;

/**
 * A field path: dotted (`messages.0.content`), and a list index may be written in brackets
 * (`messages[0].content`); `*` selects every element, a negative index counts from the end.
 */
export type FieldPath = string;

/** One redaction of a `redact` decision. */
export interface Redaction {
  field: FieldPath;
  /** `mask`: the whole value becomes `replacement`; `replace`: each match of `pattern`; `remove`: the field goes. */
  strategy: 'mask' | 'remove' | 'replace';
  /** Default `"[REDACTED]"`. */
  replacement?: string;
  /** A regular expression; required by `replace`. */
  pattern?: string;
}

/** One operation of a `transform` decision. */
export interface TransformOperation {
  op: 'set' | 'prepend' | 'append';
  field: FieldPath;
  value: unknown;
}

/** What a policy decides. */
export type PolicyDecision =
  | { decision: 'allow'; audit?: boolean; labels?: string[] }
  | { decision: 'deny'; reason?: string; policy_id?: string }
  | { decision: 'audit'; reason?: string; labels?: string[] }
  | { decision: 'redact'; redactions: Redaction[]; labels?: string[] }
  | {
      decision: 'transform';
      transformation: { operations: TransformOperation[] };
      labels?: string[];
    }
  | { decision: 'escalate'; reason?: string; labels?: string[] };

/** The name of a decision in an audit record. */
export type AuditDecision =
  | PolicyDecision['decision']
  | 'evaluation_error'
  | 'approval_granted'
  | 'approval_refused'
  | 'approval_pending';

/** One audit record: what one policy decided about one context. */
export interface AuditRecord<C extends PolicyContext = PolicyContext> {
  policy_id: string;
  decision: AuditDecision;
  interception_point: InterceptionPoint;
  /** The decision's reason, or the error text of an `evaluation_error`. */
  reason?: string;
  /** The context the policy evaluated. */
  context: C;
  /** UTC, RFC 3339 with milliseconds. */
  timestamp: string;
  /** `false` for a policy in monitor mode. */
  enforced: boolean;
}

/** Takes every audit record, before the evaluation call settles. */
export type AuditHandler = (record: AuditRecord) => void | Promise<void>;

/** A policy of one point: a read-only `id` and an `evaluate` returning a decision or a promise of one. */
export interface Policy<C extends PolicyContext> {
  readonly id: string;
  evaluate(ctx: C): PolicyDecision | Promise<PolicyDecision>;
  /** How long one evaluation may take, in milliseconds (default 30 000). */
  readonly deadlineMs?: number;
}

/** A policy of the input point. */
export type InputPolicy = Policy<InputContext>;
/** A policy of the tool-call point. */
export type ToolCallPolicy = Policy<ToolCallContext>;
/** A policy of the output point. */
export type OutputPolicy = Policy<OutputContext>;
/** A policy of the tool-result point. */
export type ToolResultPolicy = Policy<ToolResultContext>;

/** The policies of each point, and what an evaluation error does. */
export interface PolicySet {
  input?: InputPolicy[];
  tool_call?: ToolCallPolicy[];
  output?: OutputPolicy[];
  /** What tools returned, before the model reads it. */
  tool_result?: ToolResultPolicy[];
  /** `deny` (default): an evaluation error fails the call; `allow`: the policy is skipped. */
  on_error?: 'deny' | 'allow';
}

/** Options of {@link PolicyEngine}. */
export interface PolicyEngineOptions {
  policySet: PolicySet;
  onAudit?: AuditHandler;
}

/** The policy engine: built once, shared by every request. */
export declare class PolicyEngine {
  constructor(options: PolicyEngineOptions);
  /** Loads a manifest (policy set as files) with every backend it names, and builds its engine. */
  static fromManifest(path: string, options?: { onAudit?: AuditHandler }): Promise<PolicyEngine>;
  /**
   * Runs the input policies. Resolves to `undefined` when the context goes on unchanged, and
   * to the changed context (a new object) when redactions or transforms applied:
   * `const forwarded = (await engine.evaluateInput(ctx)) ?? ctx`. Rejects with
   * {@link PolicyDenialError}, {@link PolicyEvaluationError} or {@link ApprovalRequiredError}.
   */
  evaluateInput(ctx: InputContext): Promise<InputContext | undefined>;
  /** Runs the tool-call policies (see {@link PolicyEngine.evaluateInput}). */
  evaluateToolCall(ctx: ToolCallContext): Promise<ToolCallContext | undefined>;
  /** Runs the output policies (see {@link PolicyEngine.evaluateInput}). */
  evaluateOutput(ctx: OutputContext): Promise<OutputContext | undefined>;
  /**
   * Runs the tool-result policies on what a tool returned (see
   * {@link PolicyEngine.evaluateInput}); redactions reach `content` and paths inside
   * `structured`.
   */
  evaluateToolResult(ctx: ToolResultContext): Promise<ToolResultContext | undefined>;
  /**
   * Records that `by` approved the action an {@link ApprovalRequiredError} asked about
   * (`error.request.action_digest`): the same call, retried within `ttlSeconds` (default 300,
   * at most 30 days), proceeds once; a call whose action differs in any byte needs its own.
   */
  grant(actionDigest: string, by: string, options?: { ttlSeconds?: number }): Promise<void>;
}

/** A policy denied the call; `message` is its reason. */
export declare class PolicyDenialError extends Error {
  readonly name: 'PolicyDenialError';
  /** The denying policy (or the `policy_id` its decision named). */
  readonly policy_id: string;
  readonly interception_point: InterceptionPoint;
  /** The reason, when the policy gave one. */
  readonly reason?: string;
}

/**
 * A policy could not be evaluated (it threw, rejected, returned something that is not a
 * decision, timed out, or its decision could not be applied) and `on_error` is `deny`.
 * `message` is `Policy evaluation failed for '<id>' at '<point>'.`; `cause` is the Error the
 * policy threw, or an Error saying why (what it returned, a rule file's problems, a deadline).
 */
export declare class PolicyEvaluationError extends Error {
  readonly name: 'PolicyEvaluationError';
  readonly policy_id: string;
  readonly interception_point: InterceptionPoint;
  readonly cause: Error;
}

/** What an escalation asks a person to approve. */
export interface ApprovalRequest {
  id: string;
  interception_point: InterceptionPoint;
  policy_ids: string[];
  reasons: string[];
  /** The context that would be forwarded. */
  context: PolicyContext;
  /** What a grant is recorded for. */
  action_digest: string;
}

/** A policy escalated and no approval came: show `request` to a person. */
export declare class ApprovalRequiredError extends Error {
  readonly name: 'ApprovalRequiredError';
  readonly request: ApprovalRequest;
  /** The first escalating policy. */
  readonly policy_id: string;
  readonly interception_point: InterceptionPoint;
}

/** The base of the policies the Rust engine evaluates itself (DSL, Rego, Rego server, HTTP). */
export declare abstract class NativePolicy<C extends PolicyContext = PolicyContext> implements Policy<C> {
  readonly id: string;
  /** Why the policy could not be loaded (empty when it loaded): each evaluation then fails with these. */
  readonly problems: string[];
  /** What the rule checker warns about in a rule that loaded. */
  readonly warnings: string[];
  /** Evaluates this policy alone, off the JavaScript thread. */
  evaluate(ctx: C): Promise<PolicyDecision>;
}

/** How to reach a server. */
export interface ClientOptions {
  /** The server's address, for example `http://127.0.0.1:8181`. */
  baseUrl: string;
  /** How long one request may take, in milliseconds. */
  timeoutMs?: number;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
}

/** A native policy class of the point of `C` whose constructor takes the arguments `A`. */
declare abstract class NativePolicyClass<C extends PolicyContext, A extends unknown[]> extends NativePolicy<C> {
  constructor(...args: A);
}

/** `(id, dir)`: reads `<dir>/<id>.json`. */
type DslArguments = [id: string, dir: string];
/** `(id, bundlePath)`: an OPA WebAssembly bundle (`.tar.gz`); throws when it cannot be opened. */
type RegoArguments = [id: string, bundlePath: string];
/** `(id, { baseUrl }, packagePath)`: the package path such as `portcullis/input`. */
type RegoServerArguments = [id: string, options: ClientOptions, packagePath: string];
/** `(id, { baseUrl })`. */
type HttpArguments = [id: string, options: ClientOptions];

/**
 * A JSON rule policy: reads `<dir>/<id>.json`. A rule that cannot be loaded does not throw:
 * `problems` lists why and each evaluation fails with a {@link PolicyEvaluationError}.
 */
export declare class DslInputPolicy extends NativePolicyClass<InputContext, DslArguments> {}
/** A JSON rule policy of the tool-call point (see {@link DslInputPolicy}). */
export declare class DslToolCallPolicy extends NativePolicyClass<ToolCallContext, DslArguments> {}
/** A JSON rule policy of the output point (see {@link DslInputPolicy}). */
export declare class DslOutputPolicy extends NativePolicyClass<OutputContext, DslArguments> {}
/** A JSON rule policy of the tool-result point (see {@link DslInputPolicy}). */
export declare class DslToolResultPolicy extends NativePolicyClass<ToolResultContext, DslArguments> {}

/** A Rego policy compiled to WebAssembly (`opa build -t wasm`), evaluated in process. */
export declare class RegoInputPolicy extends NativePolicyClass<InputContext, RegoArguments> {}
/** A Rego bundle policy of the tool-call point (see {@link RegoInputPolicy}). */
export declare class RegoToolCallPolicy extends NativePolicyClass<ToolCallContext, RegoArguments> {}
/** A Rego bundle policy of the output point (see {@link RegoInputPolicy}). */
export declare class RegoOutputPolicy extends NativePolicyClass<OutputContext, RegoArguments> {}
/** A Rego bundle policy of the tool-result point (see {@link RegoInputPolicy}). */
export declare class RegoToolResultPolicy extends NativePolicyClass<ToolResultContext, RegoArguments> {}

/** A Rego policy on a policy server (the OPA REST API): the decision is the document at `packagePath`. */
export declare class RegoServerInputPolicy extends NativePolicyClass<InputContext, RegoServerArguments> {}
/** A Rego server policy of the tool-call point (see {@link RegoServerInputPolicy}). */
export declare class RegoServerToolCallPolicy extends NativePolicyClass<ToolCallContext, RegoServerArguments> {}
/** A Rego server policy of the output point (see {@link RegoServerInputPolicy}). */
export declare class RegoServerOutputPolicy extends NativePolicyClass<OutputContext, RegoServerArguments> {}
/** A Rego server policy of the tool-result point (see {@link RegoServerInputPolicy}). */
export declare class RegoServerToolResultPolicy extends NativePolicyClass<ToolResultContext, RegoServerArguments> {}

/** A policy evaluated by a remote endpoint: `POST {baseUrl}/engine/evaluate`. */
export declare class HttpInputPolicy extends NativePolicyClass<InputContext, HttpArguments> {}
/** A remote HTTP policy of the tool-call point (see {@link HttpInputPolicy}). */
export declare class HttpToolCallPolicy extends NativePolicyClass<ToolCallContext, HttpArguments> {}
/** A remote HTTP policy of the output point (see {@link HttpInputPolicy}). */
export declare class HttpOutputPolicy extends NativePolicyClass<OutputContext, HttpArguments> {}
/** A remote HTTP policy of the tool-result point (see {@link HttpInputPolicy}). */
export declare class HttpToolResultPolicy extends NativePolicyClass<ToolResultContext, HttpArguments> {}

/** Options of {@link createObservabilityAuditHandler}. */
export interface ObservabilityOptions {
  /** The public key (HTTP Basic user). */
  publicKey: string;
  /** The secret key (HTTP Basic password). */
  secretKey: string;
  /** The platform's address; default `https://cloud.langfuse.com`. */
  baseUrl?: string;
}

/** An audit handler that exports to an observability platform; give it as the engine's `onAudit`. */
export interface ObservabilityAuditHandler extends AuditHandler {
  /** Where spans are posted (`{baseUrl}/api/public/otel/v1/traces`). */
  readonly endpoint: string;
  /** Exports every span buffered so far; call it before the process exits. */
  flush(): Promise<void>;
}

/**
 * Exports every audit record as an `engine.policy.evaluate` span to a Langfuse-compatible
 * observability platform over OTLP/HTTP, with `session.id` (from `metadata.session_id`) and
 * `user.id` (from `metadata.agent_id`). Without options it reads `OBS_PUBLIC_KEY`,
 * `OBS_SECRET_KEY` and `OBS_BASE_URL`; a missing key throws. The engine feeds it directly
 * (records never cross into JavaScript), so it works only as an engine's `onAudit`.
 */
export declare function createObservabilityAuditHandler(options?: ObservabilityOptions): ObservabilityAuditHandler;
