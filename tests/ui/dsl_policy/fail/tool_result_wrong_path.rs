use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(tool_result, "rules/tool_result_typo.json");
}
