// @portcullis/observability: spans exported over OTLP/HTTP to a platform served by this process.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';

import { PolicyEngine } from '@portcullis/core';
import { createObservabilityAuditHandler } from '@portcullis/observability';

import { input } from './helpers.mjs';

async function platform() {
  const requests = [];
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      requests.push({ url: request.url, headers: request.headers, body: Buffer.concat(chunks) });
      response.writeHead(200, { 'content-type': 'application/x-protobuf' });
      response.end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${server.address().port}`,
    requests,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
}

test('records are exported as spans with the session and agent, on flush', async () => {
  const server = await platform();
  try {
    const audit = createObservabilityAuditHandler({ publicKey: 'pk-test', secretKey: 'sk-test', baseUrl: server.baseUrl });
    assert.equal(audit.endpoint, `${server.baseUrl}/api/public/otel/v1/traces`);
    const engine = new PolicyEngine({
      policySet: { input: [{ id: 'watch', evaluate: () => ({ decision: 'audit', reason: 'seen' }) }] },
      onAudit: audit,
    });
    assert.equal(await engine.evaluateInput(input('hello')), undefined);
    await audit.flush();
    assert.ok(server.requests.length >= 1);
    const [request] = server.requests;
    assert.equal(request.url, '/api/public/otel/v1/traces');
    assert.equal(request.headers.authorization, `Basic ${Buffer.from('pk-test:sk-test').toString('base64')}`);
    const body = request.body.toString('latin1');
    for (const expected of ['engine.policy.evaluate', 'engine.policy_id', 'watch', 'session.id', 's-1', 'user.id', 'agent-1']) {
      assert.ok(body.includes(expected), `the span carries ${expected}`);
    }
    assert.throws(() => audit({}), /give it to PolicyEngine as onAudit/);
  } finally {
    await server.close();
  }
});

test('keys come from the options or the OBS_* variables, and a missing one throws', () => {
  assert.throws(() => createObservabilityAuditHandler({ publicKey: 'pk' }), /secretKey must be given/);
  assert.throws(() => createObservabilityAuditHandler({ publicKey: 'pk', secretKey: 'sk', baseUrl: 'ftp://x' }), /createObservabilityAuditHandler: /);
  const names = ['OBS_PUBLIC_KEY', 'OBS_SECRET_KEY', 'OBS_BASE_URL'];
  const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));
  try {
    delete process.env.OBS_PUBLIC_KEY;
    delete process.env.OBS_SECRET_KEY;
    assert.throws(() => createObservabilityAuditHandler(), /OBS_PUBLIC_KEY/);
    process.env.OBS_PUBLIC_KEY = 'pk-env';
    process.env.OBS_SECRET_KEY = 'sk-env';
    process.env.OBS_BASE_URL = 'http://127.0.0.1:9';
    assert.equal(createObservabilityAuditHandler().endpoint, 'http://127.0.0.1:9/api/public/otel/v1/traces');
  } finally {
    for (const name of names) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  }
});
