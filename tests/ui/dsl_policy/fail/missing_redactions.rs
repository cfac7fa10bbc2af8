//! A `redact` rule without redactions is valid under the schema: it compiles with a warning,
//! which `deny(deprecated)` turns into an error; the policy keeps its type all the same.
#![deny(deprecated)]

use portcullis::{PolicySet, dsl_policy};

fn main() {
    let _ = PolicySet::builder()
        .output(dsl_policy!(
            output,
            "rules/missing_redactions.json"
        ))
        .build();
}
