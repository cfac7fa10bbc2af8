use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(tool_call, "rules/operator_type_mismatch.json");
}
