use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(input, "rules/field_of_another_point.json");
}
