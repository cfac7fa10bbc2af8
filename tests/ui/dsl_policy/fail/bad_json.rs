use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(output, "rules/bad_json.json");
}
