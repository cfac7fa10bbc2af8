use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(input, "rules/typo_field.json");
}
