use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(input, "rules/does_not_exist.json");
}
