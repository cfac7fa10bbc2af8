// PolicyEngine.fromManifest: a manifest naming every backend, against servers of this process.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { ApprovalRequiredError, PolicyEngine, PolicyEvaluationError } from '@portcullis/core';

import { FIXTURES, OPA_FIXTURES, input, jsonServer, output, redisServer, toolCall } from './helpers.mjs';

let server;
let dir;
before(async () => {
  server = await jsonServer((request, body) => {
    if (request.url === '/engine/evaluate') {
      return body.context.tool_name === 'rm' ? { decision: 'deny', reason: 'remote: no rm' } : { decision: 'allow' };
    }
    // The Rego server: the package's decision as a string with a sibling reason.
    const loud = body.input.messages.some((m) => m.content === m.content.toUpperCase() && /[A-Z]/.test(m.content));
    return { result: loud ? { decision: 'deny', reason: 'no shouting' } : { decision: 'allow' } };
  });
  dir = await mkdtemp(path.join(os.tmpdir(), 'portcullis-manifest-'));
});
after(async () => {
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

test('fromManifest builds an engine with every backend, audited', async () => {
  const manifest = path.join(dir, 'portcullis.yaml');
  await writeFile(
    manifest,
    [
      'on_error: deny',
      'input:',
      `  - dsl: ${path.join(FIXTURES, 'dsl', 'input', 'no_ssn.json')}`,
      `  - rego: ${path.join(OPA_FIXTURES, 'rego-wasm', 'no-ssn-input.tar.gz')}`,
      `  - rego_server: ${server.baseUrl}`,
      '    package: portcullis/input',
      '    id: shouting',
      'tool_call:',
      `  - http: ${server.baseUrl}`,
      '    id: remote-tools',
      `  - rego: ${path.join(OPA_FIXTURES, 'rego-wasm', 'approved-tools.tar.gz')}`,
      'output:',
      `  - dsl: ${path.join(FIXTURES, 'dsl', 'output', 'no_passwords.json')}`,
      '',
    ].join('\n'),
  );
  const records = [];
  const engine = await PolicyEngine.fromManifest(manifest, { onAudit: (record) => records.push(record.policy_id) });
  assert.ok(engine instanceof PolicyEngine);

  assert.equal(await engine.evaluateInput(input('hello')), undefined);
  assert.deepEqual(records, ['no_ssn', 'no-ssn-input', 'shouting']);
  await assert.rejects(engine.evaluateInput(input('my ssn')), { policy_id: 'no_ssn' });
  await assert.rejects(engine.evaluateInput(input('123-45-6789')), { policy_id: 'no-ssn-input' });
  await assert.rejects(engine.evaluateInput(input('HELLO')), { message: 'no shouting', policy_id: 'shouting' });
  await assert.rejects(engine.evaluateToolCall(toolCall('rm')), { message: 'remote: no rm' });
  await assert.rejects(engine.evaluateToolCall(toolCall('shell')), { policy_id: 'approved-tools' });
  assert.equal(await engine.evaluateToolCall(toolCall('read_file')), undefined);
  const forwarded = await engine.evaluateOutput(output('password=swordfish'));
  assert.equal(forwarded.response.content, 'password=***');
});

test('a manifest with problems rejects with every one of them', async () => {
  const manifest = path.join(dir, 'broken.yaml');
  await writeFile(manifest, ['inptu:', '  - dsl: nowhere.json', 'output:', '  - dsl: missing.json', ''].join('\n'));
  await assert.rejects(PolicyEngine.fromManifest(manifest), (error) => {
    assert.match(error.message, /cannot load the manifest/);
    assert.match(error.message, /inptu/);
    assert.match(error.message, /missing\.json/);
    return true;
  });
  await assert.rejects(PolicyEngine.fromManifest(path.join(dir, 'absent.yaml')), /cannot load the manifest/);
  await assert.rejects(PolicyEngine.fromManifest(42), TypeError);
});

test('an engine from a manifest reports evaluation errors as the constructor does', async () => {
  const closed = await jsonServer(() => ({}));
  await closed.close();
  const manifest = path.join(dir, 'remote.yaml');
  await writeFile(manifest, ['input:', `  - http: ${closed.baseUrl}`, '    id: gone', '    timeout: 1s', ''].join('\n'));
  const engine = await PolicyEngine.fromManifest(manifest);
  const error = await engine.evaluateInput(input('hi')).catch((e) => e);
  assert.ok(error instanceof PolicyEvaluationError);
  assert.equal(error.message, "Policy evaluation failed for 'gone' at 'input'.");
});

test('approvals kept in Redis reach every replica, and a grant is used once', async (t) => {
  const redis = await redisServer();
  if (!redis) return t.skip('redis-server is not installed');
  t.after(redis.stop);
  await writeFile(
    path.join(dir, 'pay.json'),
    JSON.stringify({ condition: { field: 'tool_name', equals: 'pay' }, action: 'escalate', reason: 'money moves' }),
  );
  const manifest = path.join(dir, 'replicas.yaml');
  await writeFile(
    manifest,
    ['tool_call:', '  - dsl: pay.json', `approvals: { store: '${redis.url}', timeout: 5m }`, `sessions: { store: '${redis.url}', ttl: 1h }`, ''].join('\n'),
  );
  // Two replicas of one service: one store.
  const [first, second] = [await PolicyEngine.fromManifest(manifest), await PolicyEngine.fromManifest(manifest)];
  const call = () => toolCall('pay', { amount: 5 });
  const asked = await first.evaluateToolCall(call()).catch((e) => e);
  assert.ok(asked instanceof ApprovalRequiredError);
  const again = await second.evaluateToolCall(call()).catch((e) => e);
  assert.ok(again instanceof ApprovalRequiredError);
  assert.equal(again.request.id, asked.request.id, 'the retry on the other replica is the same request');

  await first.grant(asked.request.action_digest, 'erin', { ttlSeconds: 60 });
  assert.equal(await second.evaluateToolCall(call()), undefined);
  for (const engine of [first, second]) {
    const spent = await engine.evaluateToolCall(call()).catch((e) => e);
    assert.ok(spent instanceof ApprovalRequiredError, 'a grant is used once');
  }
});
