use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(output, "tests/ui/rules/bad_json.json");
}
