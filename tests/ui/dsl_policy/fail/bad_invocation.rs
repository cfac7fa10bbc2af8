use portcullis::dsl_policy;

const RULE: &str = "examples/rules/no_ssn.json";

fn main() {
    let _a = dsl_policy!(inputs, "examples/rules/no_ssn.json");
    let _b = dsl_policy!(input, RULE);
    let _c = dsl_policy!(input);
    let _d = dsl_policy!();
}
