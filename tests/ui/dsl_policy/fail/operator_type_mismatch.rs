//! A rule valid under the schema whose condition can never hold compiles, with a warning;
//! denying warnings (here `deprecated`, the lint that carries them) makes it an error.
#![deny(deprecated)]

use portcullis::dsl_policy;

fn main() {
    let _policy = dsl_policy!(tool_call, "rules/operator_type_mismatch.json");
}
