use portcullis::{PolicySet, dsl_policy};

fn main() {
    // The policy still has the right type next to the error: the builder adds no error.
    let _ = PolicySet::builder()
        .output(dsl_policy!(
            output,
            "rules/missing_redactions.json"
        ))
        .build();
}
