// The engine with JavaScript policies, as a user of @portcullis/core writes it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  ApprovalRequiredError,
  PolicyDenialError,
  PolicyEngine,
  PolicyEvaluationError,
} from '@portcullis/core';

import { input, output, toolCall } from './helpers.mjs';

const allow = (id) => ({ id, evaluate: () => ({ decision: 'allow' }) });

/** Asserts that `error` is a PolicyDenialError whose message is `message`. */
function assertDenial(error, message) {
  assert.ok(error instanceof PolicyDenialError);
  assert.equal(error.message, message);
}

describe('PolicyEngine with JavaScript policies', () => {
  test('an allowed context resolves to undefined, and every decision is audited first', async () => {
    const records = [];
    const seen = [];
    const engine = new PolicyEngine({
      policySet: {
        input: [
          allow('first'),
          {
            id: 'second',
            async evaluate(ctx) {
              seen.push(ctx);
              return { decision: 'audit', reason: 'looked' };
            },
          },
        ],
      },
      onAudit: (record) => records.push(record),
    });
    const ctx = input('hello');
    assert.equal(await engine.evaluateInput(ctx), undefined);
    assert.deepEqual(seen, [ctx]);
    assert.deepEqual(
      records.map((record) => [record.policy_id, record.decision, record.interception_point, record.reason]),
      [
        ['first', 'allow', 'input', undefined],
        ['second', 'audit', 'input', 'looked'],
      ],
    );
    assert.deepEqual(records[0].context, ctx);
    assert.match(records[0].timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  test("records of the call's own context share it; a record after a change has the changed one", async () => {
    const records = [];
    const engine = new PolicyEngine({
      policySet: {
        input: [
          allow('first'),
          allow('second'),
          { id: 'masks', evaluate: () => ({ decision: 'redact', redactions: [{ field: 'messages[0].content', strategy: 'mask' }] }) },
          allow('after'),
        ],
      },
      onAudit: (record) => records.push(record),
    });
    const ctx = input('my secret');
    const forwarded = await engine.evaluateInput(ctx);
    assert.notEqual(forwarded.messages[0].content, 'my secret');
    assert.deepEqual(records.map((record) => record.policy_id), ['first', 'second', 'masks', 'after']);
    // The first three evaluated the context as given: one object, read once.
    assert.deepEqual(records[0].context, ctx);
    assert.equal(records[1].context, records[0].context);
    assert.equal(records[2].context, records[0].context);
    // The last one evaluated the masked context.
    assert.deepEqual(records[3].context, forwarded);
    // The context keeps its place among the record's keys.
    assert.deepEqual(Object.keys(records[2]), ['policy_id', 'decision', 'interception_point', 'context', 'timestamp', 'enforced']);
  });

  test('a denial rejects with PolicyDenialError and no later policy runs', async () => {
    let later = 0;
    const engine = new PolicyEngine({
      policySet: {
        tool_call: [
          { id: 'no-shell', evaluate: (ctx) => (ctx.tool_name === 'shell' ? { decision: 'deny', reason: 'No shell.' } : { decision: 'allow' }) },
          { id: 'later', evaluate: () => (later++, { decision: 'allow' }) },
        ],
      },
    });
    const error = await engine.evaluateToolCall(toolCall('shell', { command: 'ls' })).catch((e) => e);
    assert.ok(error instanceof PolicyDenialError);
    assert.ok(error instanceof Error);
    assert.equal(error.message, 'No shell.');
    assert.equal(error.policy_id, 'no-shell');
    assert.equal(error.interception_point, 'tool_call');
    assert.equal(later, 0);
    assert.equal(await engine.evaluateToolCall(toolCall('read_file')), undefined);
    assert.equal(later, 1);
  });

  test('policies that answer at once are called within the call; after a promise, the rest are queued', async () => {
    const order = [];
    const engine = new PolicyEngine({
      policySet: {
        input: [
          { id: 'at-once', evaluate: () => (order.push('at-once'), { decision: 'allow' }) },
          { id: 'promise', evaluate: async () => (order.push('promise'), { decision: 'allow' }) },
          { id: 'after', evaluate: () => (order.push('after'), { decision: 'deny', reason: 'last word' }) },
        ],
      },
    });
    const pending = engine.evaluateInput(input('hello'));
    order.push('returned');
    const error = await pending.catch((e) => e);
    assertDenial(error, 'last word');
    assert.deepEqual(order, ['at-once', 'promise', 'returned', 'after']);
  });

  test('the policies of one call share one reading of the context until a policy changes it', async () => {
    const seen = [];
    const inner = new PolicyEngine({
      policySet: { input: [{ id: 'inner', evaluate: (c) => (seen.push(['inner', c]), { decision: 'allow' }) }] },
    });
    const other = input('the inner call');
    const engine = new PolicyEngine({
      policySet: {
        input: [
          {
            id: 'first',
            evaluate: (c) => {
              seen.push(['first', c]);
              // A call on another engine from inside this one, on its own context.
              inner.evaluateInput(other);
              return { decision: 'allow' };
            },
          },
          { id: 'second', evaluate: (c) => (seen.push(['second', c]), { decision: 'allow' }) },
          {
            id: 'mask',
            evaluate: () => ({ decision: 'redact', redactions: [{ field: 'messages.0.content', strategy: 'mask' }] }),
          },
          { id: 'after', evaluate: (c) => (seen.push(['after', c]), { decision: 'allow' }) },
        ],
      },
    });
    const ctx = input('hello');
    const forwarded = await engine.evaluateInput(ctx);
    assert.deepEqual(
      seen.map(([id]) => id),
      ['first', 'inner', 'second', 'after'],
    );
    // A reading of the context as the engine holds it, not the caller's object.
    assert.notEqual(seen[0][1], ctx);
    assert.equal(seen[0][1].messages[0].content, 'hello');
    assert.equal(seen[2][1], seen[0][1]);
    // The call on the other engine read its own context.
    assert.equal(seen[1][1].messages[0].content, 'the inner call');
    // After the redaction, a reading of the changed context.
    assert.notEqual(seen[3][1], seen[0][1]);
    assert.deepEqual(seen[3][1], forwarded);
    assert.equal(ctx.messages[0].content, 'hello');
  });

  test('a policy may evaluate on its own engine from inside its evaluation', async () => {
    let inner;
    const engine = new PolicyEngine({
      policySet: {
        input: [
          {
            id: 'recurse',
            evaluate: (ctx) => {
              const content = ctx.messages[0].content;
              if (content === 'outer') inner = engine.evaluateInput(input('inner')).catch((e) => e);
              return content === 'inner' ? { decision: 'deny', reason: 'inner denied' } : { decision: 'allow' };
            },
          },
        ],
      },
    });
    assert.equal(await engine.evaluateInput(input('outer')), undefined);
    const error = await inner;
    assertDenial(error, 'inner denied');
  });

  test('a thenable that is not a promise is awaited as one', async () => {
    const engine = new PolicyEngine({
      policySet: {
        input: [
          {
            id: 'thenable',
            evaluate: () => ({
              then(resolve) {
                resolve({ decision: 'deny', reason: 'decided in then' });
              },
            }),
          },
        ],
      },
    });
    const error = await engine.evaluateInput(input('x')).catch((e) => e);
    assertDenial(error, 'decided in then');
  });

  test('engines work in a worker thread, each thread calling its own policies', async () => {
    const source = `
      const { parentPort } = require('node:worker_threads');
      const { PolicyEngine } = require('@portcullis/core');
      const engine = new PolicyEngine({
        policySet: { input: [{ id: 'worker', evaluate: (ctx) => ({ decision: ctx.messages[0].content === 'no' ? 'deny' : 'allow', reason: 'said no' }) }] },
      });
      const ctx = (content) => ({ messages: [{ role: 'user', content }], metadata: { agent_id: 'a', session_id: 's', timestamp: '2026-01-01T00:00:00Z' } });
      (async () => {
        const allowed = await engine.evaluateInput(ctx('yes'));
        const denied = await engine.evaluateInput(ctx('no')).catch((error) => error.message);
        parentPort.postMessage({ allowed: allowed === undefined, denied });
      })();
    `;
    const { Worker } = await import('node:worker_threads');
    const worker = new Worker(source, { eval: true });
    const [answer] = await Promise.all([
      new Promise((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      }),
      // The main thread's engine works meanwhile.
      new PolicyEngine({ policySet: { input: [allow('main')] } }).evaluateInput(input('main')),
    ]);
    await worker.terminate();
    assert.deepEqual(answer, { allowed: true, denied: 'said no' });
  });

  test('a policy may evaluate on another engine from inside its own evaluation', async () => {
    const inner = new PolicyEngine({
      policySet: { input: [{ id: 'inner', evaluate: (ctx) => ({ decision: ctx.messages[0].content === 'no' ? 'deny' : 'allow', reason: 'inner says no' }) }] },
    });
    const outer = new PolicyEngine({
      policySet: {
        input: [
          {
            id: 'outer',
            evaluate: async (ctx) => {
              const verdict = await inner.evaluateInput(ctx).then(() => 'allow', () => 'deny');
              return { decision: verdict, reason: 'the inner engine denied it' };
            },
          },
        ],
      },
    });
    assert.equal(await outer.evaluateInput(input('yes')), undefined);
    const error = await outer.evaluateInput(input('no')).catch((e) => e);
    assertDenial(error, 'the inner engine denied it');
  });

  test('a redaction resolves to a new, changed context; the original is untouched', async () => {
    const engine = new PolicyEngine({
      policySet: {
        output: [
          {
            id: 'mask',
            evaluate: () => ({
              decision: 'redact',
              redactions: [{ field: 'response.content', strategy: 'replace', pattern: '\\d{3}-\\d{2}-\\d{4}' }],
            }),
          },
          {
            id: 'sees-the-change',
            evaluate: (ctx) => ({ decision: /\d{3}-\d{2}-\d{4}/.test(ctx.response.content) ? 'deny' : 'allow' }),
          },
        ],
      },
    });
    const ctx = output('your SSN is 123-45-6789.');
    const forwarded = await engine.evaluateOutput(ctx);
    assert.equal(forwarded.response.content, 'your SSN is [REDACTED].');
    assert.equal(ctx.response.content, 'your SSN is 123-45-6789.');
    assert.deepEqual(forwarded.metadata, ctx.metadata);
    assert.equal((await engine.evaluateOutput(output('fine'))) ?? 'unchanged', 'unchanged');
  });

  test('decisions may name fields with bracketed indexes', async () => {
    const engine = new PolicyEngine({
      policySet: {
        input: [
          {
            id: 'mask-latest',
            evaluate: () => ({ decision: 'redact', redactions: [{ field: 'messages[-1].content', strategy: 'mask' }] }),
          },
          {
            id: 'tag-first',
            evaluate: () => ({
              decision: 'transform',
              transformation: { operations: [{ op: 'prepend', field: 'messages[0].content', value: '> ' }] },
            }),
          },
        ],
      },
    });
    const forwarded = await engine.evaluateInput(input('first', 'second'));
    assert.deepEqual(forwarded.messages.map((m) => m.content), ['> first', '[REDACTED]']);
  });

  test('a transform applies its operations in order', async () => {
    const engine = new PolicyEngine({
      policySet: {
        input: [
          {
            id: 'wrap',
            evaluate: () => ({
              decision: 'transform',
              transformation: {
                operations: [
                  { op: 'prepend', field: 'messages.0.content', value: '<<' },
                  { op: 'append', field: 'messages.0.content', value: '>>' },
                  { op: 'set', field: 'metadata.checked', value: true },
                ],
              },
            }),
          },
        ],
      },
    });
    const forwarded = await engine.evaluateInput(input('hi'));
    assert.equal(forwarded.messages[0].content, '<<hi>>');
    assert.equal(forwarded.metadata.checked, true);
  });

  test('an escalation rejects with ApprovalRequiredError carrying the request', async () => {
    const engine = new PolicyEngine({
      policySet: { tool_call: [{ id: 'ask', evaluate: () => ({ decision: 'escalate', reason: 'money moves' }) }] },
    });
    const error = await engine.evaluateToolCall(toolCall('transfer', { amount: 10 })).catch((e) => e);
    assert.ok(error instanceof ApprovalRequiredError);
    assert.deepEqual(error.request.policy_ids, ['ask']);
    assert.deepEqual(error.request.reasons, ['money moves']);
    assert.equal(error.request.interception_point, 'tool_call');
    assert.match(error.request.action_digest, /^[0-9a-f]{64}$/);
  });

  test('a grant lets the same call through once, and no other call', async () => {
    const engine = new PolicyEngine({
      policySet: { tool_call: [{ id: 'ask', evaluate: () => ({ decision: 'escalate', reason: 'money moves' }) }] },
    });
    const call = toolCall('transfer', { amount: 10 });
    const error = await engine.evaluateToolCall(call).catch((e) => e);
    assert.ok(error instanceof ApprovalRequiredError);
    await engine.grant(error.request.action_digest, 'erin', { ttlSeconds: 60 });
    // Other arguments are another action: the grant is not theirs.
    const other = await engine.evaluateToolCall(toolCall('transfer', { amount: 1000 })).catch((e) => e);
    assert.ok(other instanceof ApprovalRequiredError);
    assert.equal(await engine.evaluateToolCall(call), undefined);
    const again = await engine.evaluateToolCall(call).catch((e) => e);
    assert.ok(again instanceof ApprovalRequiredError, 'a grant is used once');

    await assert.rejects(engine.grant('', 'erin'), TypeError);
    await assert.rejects(engine.grant(error.request.action_digest, 42), TypeError);
    await assert.rejects(engine.grant(error.request.action_digest, 'erin', { ttlSeconds: 'soon' }), TypeError);
    await assert.rejects(engine.grant(error.request.action_digest, 'erin', { ttlSeconds: 0 }), /positive number of seconds/);
    await assert.rejects(engine.grant(error.request.action_digest, 'erin', { ttlSeconds: 1e12 }), /at most 30 days/);
  });
});

describe('JavaScript policies that fail', () => {
  const failing = async (policy, onError) => {
    const records = [];
    const engine = new PolicyEngine({
      policySet: { input: [policy, allow('after')], on_error: onError },
      onAudit: (record) => records.push(record),
    });
    const result = await engine.evaluateInput(input('hi')).catch((e) => e);
    return { result, records };
  };

  test('a throw is a PolicyEvaluationError with the seed message and the cause', async () => {
    const { result, records } = await failing({
      id: 'thrower',
      evaluate() {
        throw new RangeError('out of range');
      },
    });
    assert.ok(result instanceof PolicyEvaluationError);
    assert.equal(result.message, "Policy evaluation failed for 'thrower' at 'input'.");
    assert.equal(result.policy_id, 'thrower');
    assert.equal(result.interception_point, 'input');
    // The cause is the very error the policy threw.
    assert.ok(result.cause instanceof RangeError);
    assert.equal(result.cause.message, 'out of range');
    assert.deepEqual(records.map((r) => [r.policy_id, r.decision]), [['thrower', 'evaluation_error']]);
    assert.match(records[0].reason, /out of range/);
  });

  test('a rejection is an evaluation error too', async () => {
    const { result } = await failing({ id: 'rejecter', evaluate: () => Promise.reject(new Error('nope')) });
    assert.ok(result instanceof PolicyEvaluationError);
    assert.equal(result.cause.message, 'nope');
  });

  test('a thrown value that is not an Error is described in the cause', async () => {
    const { result, records } = await failing({ id: 'strings', evaluate: () => Promise.reject('just a string') });
    assert.ok(result instanceof PolicyEvaluationError);
    assert.match(result.cause.message, /the policy threw: .*just a string/);
    assert.match(records[0].reason, /just a string/);
  });

  test('with on_error "allow" the failing policy is skipped, and audited', async () => {
    const { result, records } = await failing(
      { id: 'thrower', evaluate: () => { throw new Error('boom'); } },
      'allow',
    );
    assert.equal(result, undefined);
    assert.deepEqual(records.map((r) => [r.policy_id, r.decision]), [
      ['thrower', 'evaluation_error'],
      ['after', 'allow'],
    ]);
  });

  for (const [what, returned, says] of [
    ['undefined', undefined, /returned undefined, which is not a decision/],
    ['a number', 42, /returned 42, which is not a decision/],
    ['an unknown decision', { decision: 'maybe' }, /returned \{"decision":"maybe"\}, which is not a decision/],
    ['a redaction without redactions', { decision: 'redact', redactions: [] }, /not a decision/],
    ['a function', () => 1, /returned a function/],
    ['a bigint', 10n, /returned the bigint 10n/],
  ]) {
    test(`returning ${what} is an evaluation error saying what came back`, async () => {
      const { result } = await failing({ id: 'garbage', evaluate: async () => returned });
      assert.ok(result instanceof PolicyEvaluationError, String(result));
      assert.match(result.cause.message, says);
    });
  }

  test('a policy that never settles fails at its deadline', async () => {
    const started = Date.now();
    const { result } = await failing({ id: 'forever', deadlineMs: 100, evaluate: () => new Promise(() => {}) });
    assert.ok(result instanceof PolicyEvaluationError);
    assert.match(result.cause.message, /100ms|deadline|time/i);
    assert.ok(Date.now() - started < 5000);
  });

  test('a field the decision names that the context lacks is an evaluation error', async () => {
    const { result } = await failing({
      id: 'bad-field',
      evaluate: () => ({ decision: 'redact', redactions: [{ field: 'messages.0.nope', strategy: 'remove' }] }),
    });
    assert.ok(result instanceof PolicyEvaluationError);
  });
});

describe('bad input never crashes Node', () => {
  test('policy sets are checked when the engine is built', () => {
    assert.throws(() => new PolicyEngine(), TypeError);
    assert.throws(() => new PolicyEngine({ policySet: { input: {} } }), /policySet.input must be an array/);
    assert.throws(() => new PolicyEngine({ policySet: { input: [{ id: 'x' }] } }), /policySet.input\[0\] is not a policy/);
    assert.throws(() => new PolicyEngine({ policySet: { input: [{ id: 7, evaluate() {} }] } }), /policySet.input\[0\].id must be a non-empty string/);
    assert.throws(() => new PolicyEngine({ policySet: { on_error: 'maybe' } }), /on_error must be "deny" or "allow"/);
    assert.throws(() => new PolicyEngine({ policySet: { inputs: [] } }), /unknown keys "inputs"/);
    assert.throws(() => new PolicyEngine({ policySet: {}, onAudit: 'log' }), /onAudit must be a function/);
  });

  test('a context that is not one rejects with a TypeError naming the problem', async () => {
    const engine = new PolicyEngine({ policySet: { input: [allow('a')] } });
    await assert.rejects(engine.evaluateInput(null), TypeError);
    await assert.rejects(engine.evaluateInput({ messages: 'no' }), /not a valid input context/);
    await assert.rejects(engine.evaluateInput({ messages: [], metadata: { agent_id: 'a' } }), /missing field `session_id`/);
    await assert.rejects(engine.evaluateToolCall(input('hi')), /not a valid tool_call context/);
  });

  test('an onAudit that throws does not change the outcome', async () => {
    const warnings = [];
    const onWarning = (warning) => warnings.push(warning);
    process.on('warning', onWarning);
    const engine = new PolicyEngine({
      policySet: { input: [allow('a')] },
      onAudit: () => {
        throw new Error('audit sink down');
      },
    });
    assert.equal(await engine.evaluateInput(input('hi')), undefined);
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    assert.ok(warnings.some((w) => /audit sink down/.test(w.message)));
  });
});

test('10,000 concurrent evaluations each get their own answer', async () => {
  let audited = 0;
  const engine = new PolicyEngine({
    policySet: {
      input: [
        {
          id: 'odd-is-denied',
          async evaluate(ctx) {
            const n = Number(ctx.messages[0].content);
            if (n % 3 === 0) await new Promise((resolve) => setImmediate(resolve));
            return n % 2 === 1 ? { decision: 'deny', reason: `odd ${n}` } : { decision: 'allow' };
          },
        },
        {
          id: 'tag',
          evaluate: (ctx) => ({
            decision: 'transform',
            transformation: { operations: [{ op: 'append', field: 'messages.0.content', value: '!' }] },
          }),
        },
      ],
    },
    onAudit: () => audited++,
  });
  const count = 10_000;
  const results = await Promise.allSettled(
    Array.from({ length: count }, (_, n) => engine.evaluateInput(input(String(n)))),
  );
  results.forEach((result, n) => {
    if (n % 2 === 1) {
      assert.equal(result.status, 'rejected');
      assert.ok(result.reason instanceof PolicyDenialError);
      assert.equal(result.reason.message, `odd ${n}`);
    } else {
      assert.equal(result.status, 'fulfilled');
      assert.equal(result.value.messages[0].content, `${n}!`);
    }
  });
  assert.equal(audited, count + count / 2);
});
