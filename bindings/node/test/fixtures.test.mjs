// The bindings' shared fixture table through the packages: the same answers as the Rust
// engine gives (bindings/node/tests/fixture_table.rs runs the same table in Rust).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { PolicyDenialError, PolicyEngine } from '@portcullis/core';
import * as dsl from '@portcullis/dsl';
import * as rego from '@portcullis/rego';

import { FIXTURES, OPA_FIXTURES } from './helpers.mjs';

const table = JSON.parse(readFileSync(path.join(FIXTURES, 'table.json'), 'utf8'));
const CLASS = { input: 'Input', tool_call: 'ToolCall', output: 'Output' };
const EVALUATE = { input: 'evaluateInput', tool_call: 'evaluateToolCall', output: 'evaluateOutput' };

function policyOf(testCase) {
  const { policy, point } = testCase;
  if (policy.dsl !== undefined) {
    return new dsl[`Dsl${CLASS[point]}Policy`](policy.id, path.join(FIXTURES, policy.dsl));
  }
  return new rego[`Rego${CLASS[point]}Policy`](policy.id, path.join(OPA_FIXTURES, policy.rego));
}

for (const testCase of table.cases) {
  test(`fixture table: ${testCase.name}`, async () => {
    const engine = new PolicyEngine({ policySet: { [testCase.point]: [policyOf(testCase)] } });
    let got;
    try {
      got = { forwarded: (await engine[EVALUATE[testCase.point]](testCase.context)) ?? null };
    } catch (error) {
      assert.ok(error instanceof PolicyDenialError, String(error));
      got = { denied: { policy_id: error.policy_id, reason: error.reason ?? null } };
    }
    assert.deepEqual(got, testCase.expect);
  });
}
