// The native policies (DSL rules, Rego bundles, a Rego policy server, an HTTP endpoint) mixed
// with JavaScript ones, against real servers of this process and the real OPA-built bundles.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  DslInputPolicy,
  DslOutputPolicy,
  DslToolCallPolicy,
  HttpInputPolicy,
  HttpToolCallPolicy,
  PolicyDenialError,
  PolicyEngine,
  PolicyEvaluationError,
  RegoInputPolicy,
  RegoOutputPolicy,
  RegoServerInputPolicy,
  RegoToolCallPolicy,
} from '@portcullis/core';

import { FIXTURES, OPA_FIXTURES, input, jsonServer, output, toolCall } from './helpers.mjs';

const RULES = path.join(FIXTURES, 'dsl');
const bundle = (name) => path.join(OPA_FIXTURES, 'rego-wasm', name);

describe('DSL policies', () => {
  test('a rule decides, and the policy reports its id', async () => {
    const policy = new DslInputPolicy('no_ssn', path.join(RULES, 'input'));
    assert.equal(policy.id, 'no_ssn');
    assert.deepEqual(policy.problems, []);
    const engine = new PolicyEngine({ policySet: { input: [policy] } });
    assert.equal(await engine.evaluateInput(input('hello')), undefined);
    const error = await engine.evaluateInput(input('my SSN is 1')).catch((e) => e);
    assert.ok(error instanceof PolicyDenialError);
    assert.equal(error.message, 'No social security numbers.');
    assert.deepEqual(await policy.evaluate(input('hello')), { decision: 'allow' });
  });

  test('a rule file that cannot be loaded fails each evaluation, as the seed does', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'portcullis-dsl-'));
    try {
      await writeFile(path.join(dir, 'typo.json'), JSON.stringify({ condition: { field: 'messages.0.contnet', contains: ['x'] }, action: 'deny' }));
      const missing = new DslInputPolicy('absent', dir);
      assert.match(missing.problems.join('\n'), /cannot read the rule file .*absent\.json/);
      const typo = new DslInputPolicy('typo', dir);
      assert.match(typo.problems.join('\n'), /contnet/);
      for (const policy of [missing, typo]) {
        const engine = new PolicyEngine({ policySet: { input: [policy] } });
        const error = await engine.evaluateInput(input('hi')).catch((e) => e);
        assert.ok(error instanceof PolicyEvaluationError);
        assert.equal(error.message, `Policy evaluation failed for '${policy.id}' at 'input'.`);
        assert.match(error.cause.message, policy === missing ? /cannot read/ : /contnet/);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('a policy of one point cannot go in another', () => {
    const policy = new DslToolCallPolicy('no_shell', path.join(RULES, 'tool_call'));
    assert.throws(() => new PolicyEngine({ policySet: { input: [policy] } }), /policySet.input\[0\]: .*tool_call policy/);
  });

  test('constructor arguments are checked', () => {
    assert.throws(() => new DslInputPolicy(), /DslInputPolicy: id must be a non-empty string/);
    assert.throws(() => new DslOutputPolicy('x', 42), /DslOutputPolicy: dir must be a non-empty string/);
  });
});

describe('Rego bundles built by OPA', () => {
  test('the three bundles decide as built, mixed with a JavaScript policy', async () => {
    const records = [];
    const engine = new PolicyEngine({
      policySet: {
        input: [new RegoInputPolicy('no-ssn', bundle('no-ssn-input.tar.gz'))],
        tool_call: [
          { id: 'js-first', evaluate: () => ({ decision: 'allow' }) },
          new RegoToolCallPolicy('approved-tools', bundle('approved-tools.tar.gz')),
        ],
        output: [new RegoOutputPolicy('no-blocked-domain', bundle('no-blocked-domain-output.tar.gz'))],
      },
      onAudit: (record) => records.push(`${record.policy_id}:${record.decision}`),
    });
    assert.equal(await engine.evaluateInput(input('call me')), undefined);
    await assert.rejects(engine.evaluateInput(input('ssn 123-45-6789')), {
      name: 'PolicyDenialError',
      message: 'Message contains a potential SSN.',
      policy_id: 'no-ssn',
    });
    assert.equal(await engine.evaluateToolCall(toolCall('summarize')), undefined);
    await assert.rejects(engine.evaluateToolCall(toolCall('delete_everything')), { message: 'Tool is not in the approved list.' });
    await assert.rejects(engine.evaluateOutput(output('go to malicious.example')), { policy_id: 'no-blocked-domain' });
    assert.deepEqual(records, [
      'no-ssn:allow',
      'no-ssn:deny',
      'js-first:allow',
      'approved-tools:allow',
      'js-first:allow',
      'approved-tools:deny',
      'no-blocked-domain:deny',
    ]);
  });

  test('a bundle that cannot be opened throws at construction', () => {
    assert.throws(() => new RegoInputPolicy('nope', path.join(OPA_FIXTURES, 'missing.tar.gz')), /cannot load the Rego bundle/);
  });
});

describe('remote policies against servers in this process', () => {
  let server;
  before(async () => {
    server = await jsonServer(async (request, body) => {
      if (request.url === '/engine/evaluate') {
        // Answer late: the JavaScript thread must stay free to serve this while the engine waits.
        await new Promise((resolve) => setTimeout(resolve, 5));
        const text = JSON.stringify(body.context);
        return text.includes('forbidden')
          ? { decision: 'deny', reason: `remote says no to ${body.policy_id} at ${body.interception_point}` }
          : { decision: 'allow' };
      }
      if (request.url === '/v1/data/portcullis/input') {
        const denied = body.input.messages.some((m) => m.content.includes('secret'));
        return { result: { decision: denied ? { decision: 'deny', reason: 'no secrets' } : { decision: 'allow' } } };
      }
      throw new Error(`unexpected ${request.url}`);
    });
  });
  after(() => server.close());

  test('an HTTP policy posts the seed request to a node:http server of the same process', async () => {
    const engine = new PolicyEngine({
      policySet: {
        input: [new HttpInputPolicy('remote', { baseUrl: server.baseUrl })],
        tool_call: [new HttpToolCallPolicy('remote-tools', { baseUrl: server.baseUrl, timeoutMs: 2000 })],
      },
    });
    assert.equal(await engine.evaluateInput(input('fine')), undefined);
    await assert.rejects(engine.evaluateInput(input('forbidden words')), {
      name: 'PolicyDenialError',
      message: 'remote says no to remote at input',
    });
    await assert.rejects(engine.evaluateToolCall(toolCall('forbidden')), { message: 'remote says no to remote-tools at tool_call' });
    const first = server.requests.find((r) => r.url === '/engine/evaluate');
    assert.equal(first.method, 'POST');
    assert.deepEqual(Object.keys(first.body).sort(), ['context', 'interception_point', 'policy_id']);
  });

  test('many HTTP evaluations at once never block this thread', async () => {
    const engine = new PolicyEngine({
      policySet: { input: [new HttpInputPolicy('remote', { baseUrl: server.baseUrl })] },
    });
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, n) =>
        engine.evaluateInput(input(n % 10 === 0 ? 'forbidden' : 'ok')).then(() => 'allowed', (e) => e.name),
      ),
    );
    clearInterval(timer);
    assert.equal(results.filter((r) => r === 'PolicyDenialError').length, 20);
    assert.equal(results.filter((r) => r === 'allowed').length, 180);
    assert.ok(ticks > 0);
  });

  test('a Rego server policy reads the document at its package path', async () => {
    const engine = new PolicyEngine({
      policySet: { input: [new RegoServerInputPolicy('opa', { baseUrl: server.baseUrl }, 'portcullis/input')] },
    });
    assert.equal(await engine.evaluateInput(input('hello')), undefined);
    await assert.rejects(engine.evaluateInput(input('a secret')), { message: 'no secrets', policy_id: 'opa' });
  });

  test('an unreachable server is an evaluation error, or skipped under on_error "allow"', async () => {
    const closed = await jsonServer(() => ({}));
    await closed.close();
    const policy = new HttpInputPolicy('gone', { baseUrl: closed.baseUrl, timeoutMs: 1000 });
    const deny = new PolicyEngine({ policySet: { input: [policy] } });
    const error = await deny.evaluateInput(input('hi')).catch((e) => e);
    assert.ok(error instanceof PolicyEvaluationError);
    assert.equal(error.policy_id, 'gone');
    const allow = new PolicyEngine({ policySet: { input: [policy], on_error: 'allow' } });
    assert.equal(await allow.evaluateInput(input('hi')), undefined);
  });

  test('bad client options are refused at construction', () => {
    assert.throws(() => new HttpInputPolicy('x', {}), /options.baseUrl must be a non-empty string/);
    assert.throws(() => new HttpInputPolicy('x', { baseUrl: 'not a url' }), /invalid HTTP policy/);
    assert.throws(() => new RegoServerInputPolicy('x', { baseUrl: 'http://127.0.0.1:1' }), /packagePath must be a non-empty string/);
  });
});
