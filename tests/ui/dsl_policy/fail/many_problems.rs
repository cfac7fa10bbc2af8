use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(input, "rules/many_problems.json");
}
