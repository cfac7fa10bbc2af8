// Side by side in one Node process: Portcullis (@portcullis/core, the native engine) against a
// pure-JavaScript engine of the seed's design written for this benchmark (its engine loop, its
// DSL, and its Rego path that loads the OPA WebAssembly module on every call), and against
// @open-policy-agent/opa-wasm with the module kept. Build the optimised addon first:
//   node scripts/build.mjs --release && node scripts/bench.mjs
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import opa from '@open-policy-agent/opa-wasm';
import { DslInputPolicy, HttpInputPolicy, PolicyEngine, RegoToolCallPolicy } from '@portcullis/core';

const here = path.dirname(fileURLToPath(import.meta.url));
const FIXTURES = path.resolve(here, '..', '..', 'fixtures');
const OPA_FIXTURES = process.env.PORTCULLIS_OPA_FIXTURES ?? path.resolve(here, '..', '..', '..', '..', 'shared', 'fixtures');
const BUNDLE = path.join(OPA_FIXTURES, 'rego-wasm', 'approved-tools.tar.gz');
const metadata = { agent_id: 'agent-1', session_id: 's-1', timestamp: '2026-01-01T00:00:00Z' };
const inputCtx = { messages: [{ role: 'user', content: 'please summarise this document for me' }], metadata };
const toolCtx = { tool_name: 'web_search', arguments: { q: 'rust' }, calling_message: { role: 'assistant', content: 'searching' }, metadata };

// --- The seed's engine, in plain JavaScript -------------------------------------------------
class SeedEngine {
  constructor(policies, onAudit) {
    this.policies = policies;
    this.onAudit = onAudit;
  }
  async evaluate(point, ctx) {
    for (const policy of this.policies) {
      const decision = await policy.evaluate(ctx);
      this.onAudit?.({ policy_id: policy.id, decision: decision.decision, interception_point: point, reason: decision.reason, context: ctx, timestamp: new Date() });
      if (decision.decision === 'deny') throw new Error(decision.reason);
    }
  }
}
function seedField(ctx, field) {
  let value = ctx;
  for (const part of field.split('.')) {
    if (value === undefined || value === null) return undefined;
    value = part === 'length' && Array.isArray(value) ? value.length : value[part];
  }
  return value;
}
class SeedDslPolicy {
  constructor(id, dir) {
    this.id = id;
    this.rule = JSON.parse(readFileSync(path.join(dir, `${id}.json`), 'utf8'));
  }
  evaluate(ctx) {
    const { condition, action, reason } = this.rule;
    const values = condition.field.includes('*')
      ? seedField(ctx, condition.field.split('.*.')[0]).map((item) => seedField(item, condition.field.split('.*.')[1]))
      : [seedField(ctx, condition.field)];
    const holds = values.some((value) => typeof value === 'string' && condition.contains.some((needle) => value.toLowerCase().includes(needle.toLowerCase())));
    return holds ? { decision: action, reason } : { decision: 'allow' };
  }
}
class SeedRegoPolicy {
  constructor(id, wasm) {
    this.id = id;
    this.wasm = wasm;
  }
  async evaluate(ctx) {
    const policy = await opa.loadPolicy(this.wasm); // the seed reloads the module on every call
    return policy.evaluate(ctx)[0].result;
  }
}
class KeptRegoPolicy {
  constructor(id, policy) {
    this.id = id;
    this.policy = policy;
  }
  evaluate(ctx) {
    return this.policy.evaluate(ctx)[0].result;
  }
}

// --- Timing -------------------------------------------------------------------------------
async function perSecond(run, { seconds = 1.5 } = {}) {
  for (let i = 0; i < 200; i++) await run(); // warm up
  let count = 0;
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    await run();
    count++;
  }
  return count / seconds;
}
const rows = [];
function report(name, ours, theirs, versus) {
  const ratio = ours / theirs;
  rows.push({ benchmark: name, against: versus, 'portcullis eval/s': Math.round(ours), 'against eval/s': Math.round(theirs), 'portcullis speed-up': `${ratio.toFixed(2)}x` });
}

const scratch = mkdtempSync(path.join(os.tmpdir(), 'portcullis-bench-'));
try {
  execFileSync('tar', ['-xzf', BUNDLE, '-C', scratch, '--no-same-owner'], { stdio: ['ignore', 'ignore', 'ignore'] });
  const wasm = readFileSync(path.join(scratch, 'policy.wasm'));
  const noop = () => {};

  // One DSL rule.
  const rules = path.join(FIXTURES, 'dsl', 'input');
  // A row of the rule `id` in `dir` on `ctx`, ours beside the seed's; the seed's rate.
  async function dslRow(name, id, dir, ctx) {
    const ours = new PolicyEngine({ policySet: { input: [new DslInputPolicy(id, dir)] }, onAudit: noop });
    const seed = new SeedEngine([new SeedDslPolicy(id, dir)], noop);
    const seedRate = await perSecond(() => seed.evaluate('input', ctx));
    report(name, await perSecond(() => ours.evaluateInput(ctx)), seedRate, 'seed JS engine');
    return seedRate;
  }
  const dslSeedRate = await dslRow('one DSL rule', 'no_ssn', rules, inputCtx);

  // What any call into native code pays before an engine does anything, beside the time a
  // call may take for "20x the seed's DSL loop".
  const dslPolicy = new DslInputPolicy('no_ssn', rules);
  let sink;
  const floors = [
    ['the seed DSL loop, one call, divided by 20', 1e9 / dslSeedRate / 20],
    ['an async function awaited, doing nothing', 1e9 / (await perSecond(async () => {}))],
    ['the same, reading one property of a native object', 1e9 / (await perSecond(async () => { sink = dslPolicy.id; }))],
    ['the same, writing the context as JSON', 1e9 / (await perSecond(async () => { sink = JSON.stringify(inputCtx); }))],
  ];

  // One DSL rule with work to do: 100 words (any of them denies) over a conversation of 40
  // messages, about 34 KB; none of the words occurs. Beside it, what writing that context as
  // JSON alone takes, which a call into native code pays before the engine reads anything.
  const terms = path.join(scratch, 'terms');
  mkdirSync(terms);
  const words = Array.from({ length: 100 }, (_, n) => `blocked-term-${n}`);
  writeFileSync(
    path.join(terms, 'terms.json'),
    JSON.stringify({ condition: { field: 'messages.*.content', contains: words }, action: 'deny', reason: 'A blocked term.' }),
  );
  const sentence = 'The quarterly report shows steady growth across all regions, with costs held flat. ';
  const longCtx = {
    messages: Array.from({ length: 40 }, (_, n) => ({ role: n % 2 ? 'assistant' : 'user', content: sentence.repeat(10) })),
    metadata,
  };
  const termsSeedRate = await dslRow('one DSL rule, 100 words, 34 KB context', 'terms', terms, longCtx);
  floors.push(
    ['the seed DSL loop on the 34 KB context, divided by 20', 1e9 / termsSeedRate / 20],
    ['writing the 34 KB context as JSON', 1e9 / (await perSecond(() => { sink = JSON.stringify(longCtx); }))],
  );
  console.table(floors.map(([floor, ns]) => ({ floor, 'ns per call': Math.round(ns) })));

  // The approved-tools bundle.
  const regoOurs = new PolicyEngine({ policySet: { tool_call: [new RegoToolCallPolicy('approved-tools', BUNDLE)] }, onAudit: noop });
  const regoSeed = new SeedEngine([new SeedRegoPolicy('approved-tools', wasm)], noop);
  const regoKept = new SeedEngine([new KeptRegoPolicy('approved-tools', await opa.loadPolicy(wasm))], noop);
  const regoOursRate = await perSecond(() => regoOurs.evaluateToolCall(toolCtx));
  report('approved-tools Rego bundle', regoOursRate, await perSecond(() => regoSeed.evaluate('tool_call', toolCtx), { seconds: 3 }), 'seed, module loaded per call');
  report('approved-tools Rego bundle', regoOursRate, await perSecond(() => regoKept.evaluate('tool_call', toolCtx)), 'opa-wasm, module kept');

  // Ten plain-JavaScript allow policies.
  const allows = Array.from({ length: 10 }, (_, n) => ({ id: `allow-${n}`, evaluate: () => ({ decision: 'allow' }) }));
  const jsOurs = new PolicyEngine({ policySet: { input: allows }, onAudit: noop });
  const jsSeed = new SeedEngine(allows, noop);
  report('10 plain-JS allow policies', await perSecond(() => jsOurs.evaluateInput(inputCtx)), await perSecond(() => jsSeed.evaluate('input', inputCtx)), 'seed JS engine');
  console.table(rows);

  // An HTTP policy, 64 concurrent promises, against a server of this process.
  const server = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end('{"decision":"allow"}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const httpEngine = new PolicyEngine({ policySet: { input: [new HttpInputPolicy('remote', { baseUrl: `http://127.0.0.1:${server.address().port}` })] } });
  let done = 0;
  const end = performance.now() + 3000;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (performance.now() < end) {
        await httpEngine.evaluateInput(inputCtx);
        done++;
      }
    }),
  );
  server.close();
  console.log(`HTTP policy, 64 concurrent promises: ${Math.round(done / 3)} evaluations/s`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
