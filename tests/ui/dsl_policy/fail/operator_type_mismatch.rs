use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(tool_call, "tests/ui/rules/operator_type_mismatch.json");
}
