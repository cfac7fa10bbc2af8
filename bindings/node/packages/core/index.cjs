'use strict';
// The one implementation of @portcullis/core (index.mjs re-exports it for ESM), over the
// native addon beside this file. Every rule of the engine runs in the addon; this layer
// translates JavaScript values and errors, and calls the JavaScript policies.

const path = require('node:path');

const ADDON = 'portcullis.linux-x64-gnu.node';

function loadAddon() {
  try {
    return require(path.join(__dirname, ADDON));
  } catch (error) {
    throw new Error(
      `@portcullis/core: cannot load its native addon ${ADDON} (it is built for linux-x64 ` +
        `with glibc; this is ${process.platform}-${process.arch}): ${error.message}`,
      { cause: error },
    );
  }
}

const addon = loadAddon();

/** The interception points, by their wire names, in the order a policy set lists them. */
const POINTS = ['input', 'tool_call', 'output', 'tool_result'];

/** Where a native policy keeps its addon object (not enumerable). */
const NATIVE = Symbol('portcullis.native');

/** A policy denied the call. `message` is the policy's reason. */
class PolicyDenialError extends Error {
  constructor(message, { policy_id, interception_point, reason } = {}) {
    super(message);
    this.name = 'PolicyDenialError';
    this.policy_id = policy_id;
    this.interception_point = interception_point;
    this.reason = reason ?? undefined;
  }
}

/** A policy could not be evaluated, and the policy set's `on_error` is `deny`. */
class PolicyEvaluationError extends Error {
  constructor(policy_id, interception_point, cause) {
    super(`Policy evaluation failed for '${policy_id}' at '${interception_point}'.`, { cause });
    this.name = 'PolicyEvaluationError';
    this.policy_id = policy_id;
    this.interception_point = interception_point;
  }
}

/** A policy escalated: the call may proceed only once a person approves `request`. */
class ApprovalRequiredError extends Error {
  constructor(request) {
    super(
      `Approval required for '${request.policy_ids.join("', '")}' at '${request.interception_point}'.`,
    );
    this.name = 'ApprovalRequiredError';
    this.request = request;
    this.policy_id = request.policy_ids[0];
    this.interception_point = request.interception_point;
  }
}

function describeValue(value) {
  switch (typeof value) {
    case 'undefined':
      return 'undefined';
    case 'function':
      return `a function${value.name ? ` (${value.name})` : ''}`;
    case 'symbol':
      return 'a symbol';
    case 'bigint':
      return `the bigint ${value}n`;
    default:
      return Object.prototype.toString.call(value);
  }
}

function describeThrown(thrown) {
  try {
    if (thrown instanceof Error) return `${thrown.name}: ${thrown.message}`;
    return `${describeValue(thrown)} ${String(thrown)}`.trim();
  } catch {
    return describeValue(thrown);
  }
}

/** The report of a plain `{ decision: 'allow' }`, as `settle` would write it (`ALLOW_REPORT` in the crate). */
const ALLOW_REPORT = '{"value":{"decision":"allow"}}';

/** Whether `value` is a plain object whose only own key is `decision`, with `'allow'`. */
function isPlainAllow(value) {
  if (value === null || typeof value !== 'object' || Object.getPrototypeOf(value) !== Object.prototype) return false;
  let keys = 0;
  for (const key in value) {
    if (key !== 'decision' || !Object.hasOwn(value, key)) return false;
    keys++;
  }
  return keys === 1 && value.decision === 'allow';
}

/** What a JavaScript policy gave, as the addon reads it (see `Settled` in the crate). */
function settle(value) {
  if (isPlainAllow(value)) return ALLOW_REPORT;
  let json;
  try {
    json = JSON.stringify(value);
  } catch (error) {
    return JSON.stringify({ not_json: `${describeValue(value)} (${error.message})` });
  }
  if (json === undefined) return JSON.stringify({ not_json: describeValue(value) });
  return `{"value":${json}}`;
}

/**
 * The errors JavaScript policies threw, by token, until the call they failed settles and
 * hands one back as its PolicyEvaluationError's `cause`. Errors no call hands back (skipped
 * under `on_error: "allow"`, or thrown after a deadline) leave the oldest first once there
 * are more than MAX_KEPT_THROWN.
 */
const thrownErrors = new Map();
const MAX_KEPT_THROWN = 1000;
let nextThrownToken = 1;

function keepThrown(thrown) {
  if (!(thrown instanceof Error)) return undefined;
  const token = nextThrownToken++;
  thrownErrors.set(token, thrown);
  if (thrownErrors.size > MAX_KEPT_THROWN) thrownErrors.delete(thrownErrors.keys().next().value);
  return token;
}

function takeThrown(token) {
  const thrown = thrownErrors.get(token);
  thrownErrors.delete(token);
  return thrown;
}

/** What a JavaScript policy threw, as the addon reads it. */
function threw(thrown) {
  return JSON.stringify({ threw: { message: describeThrown(thrown), token: keepThrown(thrown) } });
}

/**
 * The calls into the addon under way on this thread, innermost last, each with the last
 * context it handed a policy (as JSON, and read): the policies called within one call on the
 * same context share one object, read once, as the seed's policies share the caller's.
 */
const callFrames = [];

/**
 * The context a policy is given, from its JSON; `null` from the addon means the same context
 * as the last policy called within the same call was given.
 */
function contextFor(contextJson) {
  const frame = callFrames.at(-1);
  if (contextJson === null) {
    if (frame?.ctx === undefined) throw new Error('@portcullis/core: the addon referred to a context it never gave');
    return frame.ctx;
  }
  if (frame === undefined) return JSON.parse(contextJson);
  if (frame.json !== contextJson) {
    frame.json = contextJson;
    frame.ctx = JSON.parse(contextJson);
  }
  return frame.ctx;
}

/**
 * The function the addon calls, on this thread, to evaluate a JavaScript policy, with the
 * context as JSON: `true` for a plain allow and the report of anything else at once when
 * `evaluate` returns a value (the engine goes on without leaving the call), a promise of the
 * report when `evaluate` returns a promise (or any thenable).
 */
function dispatcher(policy) {
  return (contextJson) => {
    let value;
    let thenable;
    try {
      value = policy.evaluate(contextFor(contextJson));
      thenable =
        value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function';
    } catch (thrown) {
      return threw(thrown);
    }
    if (thenable) return Promise.resolve(value).then(settle, threw);
    return isPlainAllow(value) || settle(value);
  };
}

function checkString(value, what) {
  if (typeof value !== 'string' || value === '') {
    throw new TypeError(`${what} must be a non-empty string, not ${describeValue(value)}`);
  }
  return value;
}

function checkClientOptions(options, what) {
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`${what} must be an object such as { baseUrl: "http://127.0.0.1:8181" }`);
  }
  const { baseUrl, timeoutMs, headers } = options;
  checkString(baseUrl, `${what}.baseUrl`);
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs > 0)) {
    throw new TypeError(`${what}.timeoutMs must be a positive integer of milliseconds`);
  }
  return { baseUrl, timeoutMs, headers };
}

/** The base of the native policies: the Rust backends, evaluated by the addon. */
class NativePolicy {
  constructor(native) {
    Object.defineProperty(this, NATIVE, { value: native });
  }

  /** The policy's id. */
  get id() {
    return this[NATIVE].id;
  }

  /** Why the policy could not be loaded (empty when it loaded). */
  get problems() {
    return this[NATIVE].problems;
  }

  /** What the rule checker warns about. */
  get warnings() {
    return this[NATIVE].warnings;
  }

  /** Evaluates this policy alone, off the JavaScript thread. */
  async evaluate(ctx) {
    return JSON.parse(await this[NATIVE].evaluate(JSON.stringify(ctx)));
  }
}

/** Defines the class `name` of policies at `point` built by `make(point, ...arguments)`. */
function nativeClass(name, point, make) {
  const named = {
    [name]: class extends NativePolicy {
      constructor(...args) {
        super(make(point, name, ...args));
      }
    },
  };
  return named[name];
}

const CLASS_POINTS = { Input: 'input', ToolCall: 'tool_call', Output: 'output', ToolResult: 'tool_result' };

/** The four classes of one backend: `<prefix>InputPolicy`, `..ToolCallPolicy`, `..OutputPolicy`, `..ToolResultPolicy`. */
function nativeClasses(prefix, make) {
  const classes = {};
  for (const [suffix, point] of Object.entries(CLASS_POINTS)) {
    const name = `${prefix}${suffix}Policy`;
    classes[name] = nativeClass(name, point, make);
  }
  return classes;
}

const dsl = nativeClasses('Dsl', (point, name, id, dir) =>
  addon.dslPolicy(point, checkString(id, `${name}: id`), checkString(dir, `${name}: dir`)),
);
const rego = nativeClasses('Rego', (point, name, id, bundlePath) =>
  addon.regoPolicy(
    point,
    checkString(id, `${name}: id`),
    checkString(bundlePath, `${name}: bundlePath`),
  ),
);
const regoServer = nativeClasses('RegoServer', (point, name, id, options, packagePath) =>
  addon.regoServerPolicy(
    point,
    checkString(id, `${name}: id`),
    checkClientOptions(options, `${name}: options`),
    checkString(packagePath, `${name}: packagePath`),
  ),
);
const http = nativeClasses('Http', (point, name, id, options) =>
  addon.httpPolicy(point, checkString(id, `${name}: id`), checkClientOptions(options, `${name}: options`)),
);

const POLICY_SET_KEYS = new Set([...POINTS, 'on_error']);

function nativePolicySet(policySet) {
  if (policySet === null || typeof policySet !== 'object') {
    throw new TypeError('policySet must be an object such as { input: [policy], on_error: "deny" }');
  }
  const unknown = Object.keys(policySet).filter((key) => !POLICY_SET_KEYS.has(key));
  if (unknown.length > 0) {
    throw new TypeError(
      `policySet has unknown keys ${unknown.map((key) => JSON.stringify(key)).join(', ')}: ` +
        'expected input, tool_call, output, tool_result, on_error',
    );
  }
  const onError = policySet.on_error ?? 'deny';
  if (onError !== 'deny' && onError !== 'allow') {
    throw new TypeError(`policySet.on_error must be "deny" or "allow", not ${JSON.stringify(onError)}`);
  }
  const set = new addon.NativePolicySet(onError);
  for (const point of POINTS) {
    const policies = policySet[point];
    if (policies === undefined) continue;
    if (!Array.isArray(policies)) {
      throw new TypeError(`policySet.${point} must be an array of policies`);
    }
    policies.forEach((policy, index) => addPolicy(set, point, policy, `policySet.${point}[${index}]`));
  }
  return set;
}

function addPolicy(set, point, policy, where) {
  if (policy instanceof NativePolicy) {
    try {
      set.addNative(point, policy[NATIVE]);
    } catch (error) {
      throw new TypeError(`${where}: ${error.message}`);
    }
    return;
  }
  if (policy === null || typeof policy !== 'object' || typeof policy.evaluate !== 'function') {
    throw new TypeError(`${where} is not a policy: a policy is an object with an id and an evaluate(ctx) method`);
  }
  const id = policy.id;
  checkString(id, `${where}.id`);
  const deadline = policy.deadlineMs;
  if (deadline !== undefined && !(typeof deadline === 'number' && deadline > 0)) {
    throw new TypeError(`${where}.deadlineMs must be a positive number of milliseconds`);
  }
  set.addJs(point, id, dispatcher(policy), deadline);
}

function checkOnAudit(onAudit) {
  if (onAudit !== undefined && typeof onAudit !== 'function') {
    throw new TypeError('onAudit must be a function taking an audit record');
  }
  return onAudit;
}

/**
 * How an engine audits for `onAudit`: `keep` (records come back with each call for the
 * JavaScript handler), or `sink` (a native handler the engine feeds itself).
 */
function auditPlan(onAudit) {
  checkOnAudit(onAudit);
  const sink = onAudit?.[NATIVE];
  return sink === undefined ? { keep: onAudit !== undefined, sink: undefined } : { keep: false, sink };
}

/**
 * An audit handler that exports every record as a span to an observability platform
 * (Langfuse-compatible, OTLP/HTTP), with `session.id` and `user.id` from the context's
 * metadata. Without options it reads OBS_PUBLIC_KEY, OBS_SECRET_KEY and OBS_BASE_URL.
 * Give it to the engine as `onAudit`: the engine feeds it without a call into JavaScript.
 * `await handler.flush()` exports what is buffered; call it before the process exits.
 */
function createObservabilityAuditHandler(options) {
  let settings;
  if (options !== undefined) {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('createObservabilityAuditHandler takes options such as { publicKey, secretKey, baseUrl }');
    }
    const { publicKey, secretKey, baseUrl } = options;
    const missing = Object.entries({ publicKey, secretKey })
      .filter(([, value]) => typeof value !== 'string' || value === '')
      .map(([name]) => name);
    if (missing.length > 0) {
      throw new TypeError(
        `createObservabilityAuditHandler: ${missing.join(' and ')} must be given (or call it without ` +
          'options to read OBS_PUBLIC_KEY, OBS_SECRET_KEY and OBS_BASE_URL)',
      );
    }
    if (baseUrl !== undefined) checkString(baseUrl, 'createObservabilityAuditHandler: baseUrl');
    settings = { publicKey, secretKey, baseUrl };
  }
  let sink;
  try {
    sink = addon.observabilitySink(settings);
  } catch (error) {
    throw new Error(`createObservabilityAuditHandler: ${error.message}`);
  }
  const handler = function observabilityAuditHandler() {
    throw new TypeError(
      'the observability audit handler is fed by the engine: give it to PolicyEngine as onAudit',
    );
  };
  Object.defineProperty(handler, NATIVE, { value: sink });
  Object.defineProperty(handler, 'endpoint', { value: sink.endpoint, enumerable: true });
  handler.flush = async () => {
    await sink.flush();
  };
  return handler;
}

/**
 * Hands each record to `onAudit`; a handler that throws is reported, never the call's failure.
 * A record whose `context` is 0 evaluated the call's own context, which the outcome carries
 * once as `callContext`: such records share that one object.
 */
function deliver(onAudit, records, callContext) {
  for (const record of records) {
    if (record.context === 0) record.context = callContext;
    try {
      const returned = onAudit(record);
      if (returned && typeof returned.then === 'function') {
        returned.then(undefined, (error) => reportAuditFailure(error));
      }
    } catch (error) {
      reportAuditFailure(error);
    }
  }
}

function reportAuditFailure(error) {
  process.emitWarning(`onAudit threw: ${describeThrown(error)}`, { code: 'PORTCULLIS_AUDIT' });
}

function checkContext(ctx, point) {
  if (ctx === null || typeof ctx !== 'object' || Array.isArray(ctx)) {
    throw new TypeError(`the ${point} context must be an object, not ${describeValue(ctx)}`);
  }
  return JSON.stringify(ctx);
}

/** The outcome of one call, as the addon reports it, as a value or a thrown error. */
function settleOutcome(outcome) {
  switch (outcome.outcome) {
    case 'forward':
      return outcome.context === null ? undefined : outcome.context;
    case 'denied':
      throw new PolicyDenialError(outcome.message, outcome);
    case 'evaluation_error': {
      // The policy's own Error when it threw one; otherwise an Error saying why.
      const thrown = outcome.thrown === null ? undefined : takeThrown(outcome.thrown);
      throw new PolicyEvaluationError(
        outcome.policy_id,
        outcome.interception_point,
        thrown ?? new Error(outcome.cause),
      );
    }
    case 'approval_required':
      throw new ApprovalRequiredError(outcome.request);
    case 'invalid_context':
      throw new TypeError(outcome.message);
    default:
      throw new Error(`@portcullis/core: unexpected outcome ${JSON.stringify(outcome.outcome)}`);
  }
}

/** The outcome of a call that forwards its context unchanged with no records (`FORWARD_UNCHANGED` in the crate). */
const FORWARD_UNCHANGED = '{"outcome":"forward","context":null}';

/** The policy engine: built once, shared by every request. */
class PolicyEngine {
  #native;
  #onAudit;

  constructor(options) {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('PolicyEngine needs options such as { policySet, onAudit }');
    }
    const { policySet, onAudit } = options;
    const plan = auditPlan(onAudit);
    this.#native = options[NATIVE] ?? addon.createEngine(nativePolicySet(policySet ?? {}), plan.keep, plan.sink);
    this.#onAudit = plan.keep ? onAudit : undefined;
  }

  /** Loads a manifest (policy set as files, YAML or JSON) and builds its engine. */
  static async fromManifest(manifestPath, options = {}) {
    checkString(manifestPath, 'PolicyEngine.fromManifest: path');
    const onAudit = options?.onAudit;
    const plan = auditPlan(onAudit);
    let native;
    try {
      native = await addon.engineFromManifest(path.resolve(manifestPath), plan.keep, plan.sink);
    } catch (error) {
      throw new Error(`cannot load the manifest ${manifestPath}:\n${error.message}`);
    }
    return new PolicyEngine({ [NATIVE]: native, onAudit });
  }

  /** Runs the input policies: `undefined` when the context goes on unchanged, else the changed context. */
  evaluateInput(ctx) {
    return this.#evaluate('input', ctx);
  }

  /** Runs the tool-call policies. */
  evaluateToolCall(ctx) {
    return this.#evaluate('tool_call', ctx);
  }

  /** Runs the output policies. */
  evaluateOutput(ctx) {
    return this.#evaluate('output', ctx);
  }

  /** Runs the tool-result policies on what a tool returned, before the model reads it. */
  evaluateToolResult(ctx) {
    return this.#evaluate('tool_result', ctx);
  }

  /**
   * Records that `by` approved the action an `ApprovalRequiredError` asked about
   * (`error.request.action_digest`): the same call, retried within `ttlSeconds` (default 300),
   * proceeds once. A call whose action differs in any byte needs its own approval.
   */
  async grant(actionDigest, by, { ttlSeconds = 300 } = {}) {
    checkString(actionDigest, 'PolicyEngine.grant: actionDigest');
    checkString(by, 'PolicyEngine.grant: by');
    if (typeof ttlSeconds !== 'number') {
      throw new TypeError(`PolicyEngine.grant: ttlSeconds must be a number, not ${describeValue(ttlSeconds)}`);
    }
    await this.#native.grant(actionDigest, by, ttlSeconds);
  }

  async #evaluate(point, ctx) {
    // The outcome itself when the addon could decide at once (no policy waited),
    // otherwise a promise of it.
    const json = checkContext(ctx, point);
    callFrames.push({ json: undefined, ctx: undefined });
    let raw;
    try {
      raw = this.#native.evaluate(point, json);
    } finally {
      callFrames.pop();
    }
    const text = typeof raw === 'string' ? raw : await raw;
    if (text === FORWARD_UNCHANGED) return undefined;
    const outcome = JSON.parse(text);
    if (outcome.records !== undefined && this.#onAudit !== undefined) {
      deliver(this.#onAudit, outcome.records, outcome.call_context);
    }
    return settleOutcome(outcome);
  }
}

module.exports = {
  PolicyEngine,
  PolicyDenialError,
  PolicyEvaluationError,
  ApprovalRequiredError,
  NativePolicy,
  createObservabilityAuditHandler,
  ...dsl,
  ...rego,
  ...regoServer,
  ...http,
};
