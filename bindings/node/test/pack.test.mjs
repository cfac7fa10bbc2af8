// The tarballs `npm pack` makes, installed in a scratch project with no build step, imported
// both as ESM and as CommonJS.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { FIXTURES } from './helpers.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PACKAGES = ['core', 'dsl', 'rego', 'rego-rest', 'http', 'otel', 'observability'];

let scratch;
before(async () => {
  scratch = await mkdtemp(path.join(os.tmpdir(), 'portcullis-pack-'));
  const tarballs = path.join(scratch, 'tarballs');
  const project = path.join(scratch, 'project');
  execFileSync('mkdir', ['-p', tarballs, project]);
  for (const name of PACKAGES) {
    execFileSync('npm', ['pack', '--silent', '--pack-destination', tarballs], {
      cwd: path.join(root, 'packages', name),
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  }
  const files = (await readdir(tarballs)).map((file) => path.join(tarballs, file));
  assert.equal(files.length, PACKAGES.length);
  await writeFile(path.join(project, 'package.json'), JSON.stringify({ name: 'scratch', private: true }));
  // The OpenTelemetry API (otel's peer) is the copy the workspace installed, packed as it is: an
  // install by name would need the registry's metadata, which `npm ci` does not keep in the
  // cache, so a fresh machine could not install it offline.
  const peers = path.join(scratch, 'peers');
  execFileSync('mkdir', ['-p', peers]);
  execFileSync('npm', ['pack', '--silent', '--ignore-scripts', '--pack-destination', peers], {
    cwd: path.join(root, 'node_modules', '@opentelemetry', 'api'),
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const api = (await readdir(peers)).map((file) => path.join(peers, file));
  assert.equal(api.length, 1);
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--ignore-scripts', ...files, ...api], {
    cwd: project,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
});
after(() => rm(scratch, { recursive: true, force: true }));

const RULES = JSON.stringify(path.join(FIXTURES, 'dsl', 'input'));

function run(file, source) {
  const project = path.join(scratch, 'project');
  const script = path.join(project, file);
  execFileSync('bash', ['-c', `cat > ${JSON.stringify(script)}`], { input: source });
  return execFileSync(process.execPath, [script], { cwd: project, encoding: 'utf8' }).trim();
}

test('the installed tarballs import as ESM, with instanceof across packages', () => {
  const printed = run(
    'check.mjs',
    `
import { PolicyEngine, PolicyDenialError, NativePolicy } from '@portcullis/core';
import { DslInputPolicy } from '@portcullis/dsl';
import { RegoInputPolicy } from '@portcullis/rego';
import { RegoServerInputPolicy } from '@portcullis/rego-rest';
import { HttpInputPolicy } from '@portcullis/http';
import { createOtelAuditHandler } from '@portcullis/otel';
import { createObservabilityAuditHandler } from '@portcullis/observability';
import { createRequire } from 'node:module';
const core = createRequire(import.meta.url)('@portcullis/core');
const policy = new DslInputPolicy('no_ssn', ${RULES});
const engine = new PolicyEngine({ policySet: { input: [policy] }, onAudit: createOtelAuditHandler() });
const ctx = { messages: [{ role: 'user', content: 'my ssn' }], metadata: { agent_id: 'a', session_id: 's', timestamp: '2026-01-01T00:00:00Z' } };
const error = await engine.evaluateInput(ctx).catch((e) => e);
console.log([
  error instanceof PolicyDenialError,
  error instanceof core.PolicyDenialError,
  policy instanceof NativePolicy,
  typeof RegoInputPolicy, typeof RegoServerInputPolicy, typeof HttpInputPolicy, typeof createObservabilityAuditHandler,
  error.message,
].join(' '));
`,
  );
  assert.equal(printed, 'true true true function function function function No social security numbers.');
});

test('the installed tarballs require as CommonJS', () => {
  const printed = run(
    'check.cjs',
    `
const { PolicyEngine, PolicyDenialError } = require('@portcullis/core');
const { DslInputPolicy } = require('@portcullis/dsl');
const { createOtelAuditHandler } = require('@portcullis/otel');
const engine = new PolicyEngine({ policySet: { input: [new DslInputPolicy('no_ssn', ${RULES})] }, onAudit: createOtelAuditHandler() });
const ctx = { messages: [{ role: 'user', content: 'hello' }], metadata: { agent_id: 'a', session_id: 's', timestamp: '2026-01-01T00:00:00Z' } };
engine.evaluateInput(ctx).then(async (forwarded) => {
  const error = await engine.evaluateInput({ ...ctx, messages: [{ role: 'user', content: 'SSN' }] }).catch((e) => e);
  console.log(String(forwarded), error instanceof PolicyDenialError, error.policy_id);
});
`,
  );
  assert.equal(printed, 'undefined true no_ssn');
});
