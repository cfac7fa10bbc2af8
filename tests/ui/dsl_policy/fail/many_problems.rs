use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(input, "tests/ui/rules/many_problems.json");
}
