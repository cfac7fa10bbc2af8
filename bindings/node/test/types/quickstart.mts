// The seed's quick start, with our package names, type-checked against the packages' .d.ts.
import {
  ApprovalRequiredError,
  PolicyDenialError,
  PolicyEngine,
  PolicyEvaluationError,
  type AuditRecord,
  type InputContext,
  type InputPolicy,
  type OutputContext,
  type PolicyDecision,
  type ToolCallPolicy,
  type ToolResultContext,
  type ToolResultPolicy,
} from '@portcullis/core';
import { DslInputPolicy, DslOutputPolicy, DslToolResultPolicy } from '@portcullis/dsl';
import { RegoToolCallPolicy } from '@portcullis/rego';
import { RegoServerInputPolicy, type RegoServerClientOptions } from '@portcullis/rego-rest';
import { HttpOutputPolicy, type HttpClientOptions } from '@portcullis/http';
import { createOtelAuditHandler } from '@portcullis/otel';
import { createObservabilityAuditHandler } from '@portcullis/observability';

const maxMessages: InputPolicy = {
  id: 'max-messages',
  evaluate: (ctx) => (ctx.messages.length > 50 ? { decision: 'deny', reason: 'too long' } : { decision: 'allow' }),
};
const asyncTools: ToolCallPolicy = {
  id: 'tools',
  async evaluate(ctx): Promise<PolicyDecision> {
    return ctx.tool_name === 'shell'
      ? { decision: 'redact', redactions: [{ field: 'arguments.command', strategy: 'mask' }] }
      : { decision: 'allow' };
  },
};
const webPages: ToolResultPolicy = {
  id: 'web-pages',
  evaluate: (ctx) =>
    ctx.tool_name === 'web_fetch' ? { decision: 'audit', reason: 'web content', labels: ['untrusted'] } : { decision: 'allow' },
};
const server: RegoServerClientOptions = { baseUrl: 'http://127.0.0.1:8181' };
const remote: HttpClientOptions = { baseUrl: 'http://127.0.0.1:9000', timeoutMs: 500 };

const records: AuditRecord[] = [];
const engine = new PolicyEngine({
  policySet: {
    input: [new DslInputPolicy('no-pii', './policies'), maxMessages, new RegoServerInputPolicy('opa', server, 'portcullis/input')],
    tool_call: [new RegoToolCallPolicy('approved-tools', './approved-tools.tar.gz'), asyncTools],
    output: [new DslOutputPolicy('no-links', './policies'), new HttpOutputPolicy('moderation', remote)],
    tool_result: [webPages, new DslToolResultPolicy('label-web', './policies')],
    on_error: 'deny',
  },
  onAudit: (record) => {
    records.push(record);
  },
});
void createOtelAuditHandler();
void createObservabilityAuditHandler({ publicKey: 'pk', secretKey: 'sk' }).flush();

export async function run(ctx: InputContext, answer: OutputContext, result: ToolResultContext): Promise<string> {
  try {
    const read: ToolResultContext = (await engine.evaluateToolResult(result)) ?? result;
    void read.structured;
    const forwarded: InputContext = (await engine.evaluateInput(ctx)) ?? ctx;
    const checked: OutputContext | undefined = await engine.evaluateOutput(answer);
    const other = await PolicyEngine.fromManifest('portcullis.yaml', { onAudit: (r) => console.log(r.decision) });
    await other.evaluateInput(forwarded);
    return (checked ?? answer).response.content;
  } catch (error) {
    if (error instanceof PolicyDenialError) return `${error.policy_id} at ${error.interception_point}: ${error.message}`;
    if (error instanceof PolicyEvaluationError) return `${error.message} ${error.cause.message}`;
    if (error instanceof ApprovalRequiredError) return error.request.action_digest;
    throw error;
  }
}
