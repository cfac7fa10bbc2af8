// The same packages through require(), type-checked.
import core = require('@portcullis/core');
import dsl = require('@portcullis/dsl');

const policy: core.NativePolicy<core.InputContext> = new dsl.DslInputPolicy('no-pii', './policies');
export const engine = new core.PolicyEngine({ policySet: { input: [policy] } });
