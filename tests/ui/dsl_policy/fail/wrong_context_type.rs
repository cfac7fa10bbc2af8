use portcullis::dsl_policy;

fn main() {
    // An input rule compiled for the output point: its fields are not in `OutputContext`.
    let _policy = dsl_policy!(output, "examples/rules/no_ssn.json");
}
