//! The pieces `dsl_policy!` builds on: the decision closure and the streaming form. What the
//! macro emits as a whole is pinned in `macros/core/tests/expanded/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis_dsl::{check_source, codegen};
use portcullis_engine::InterceptionPoint;

#[test]
fn thresholds_are_bit_exact() {
    let rule = check_source(
        r#"{ "condition": { "field": "response.content.length", "greater_than": 1.5 }, "action": "deny", "mode": "monitor" }"#,
        "m.json",
        InterceptionPoint::Output,
    )
    .expect("valid");
    let text = codegen::decide_closure(&rule).to_string();
    assert!(
        text.contains(&format!("{}u64", 1.5f64.to_bits())),
        "thresholds are bit-exact: {text}"
    );
}

#[test]
fn pieces_for_custom_policy_types() {
    let rule = check_source(
        r#"{ "condition": { "field": "response.content", "contains": ["Password"] }, "action": "deny" }"#,
        "p.json",
        InterceptionPoint::Output,
    )
    .expect("valid");
    let closure: syn::ExprClosure = syn::parse2(codegen::decide_closure(&rule)).expect("a closure");
    assert_eq!(closure.inputs.len(), 1);
    let rules = codegen::streaming_rules(&rule).expect("a streaming form");
    let rules: syn::Expr = syn::parse2(rules).expect("an expression");
    assert!(
        quote::ToTokens::to_token_stream(&rules)
            .to_string()
            .contains("[pP][aA][sS][sS][wW][oO][rR][dD]")
    );
    let input = check_source(
        r#"{ "condition": { "always": true }, "action": "deny" }"#,
        "i.json",
        InterceptionPoint::Input,
    )
    .expect("valid");
    assert!(codegen::streaming_rules(&input).is_none());
    let closure = codegen::decide_closure(&input).to_string();
    assert!(closure.starts_with("| _context"), "{closure}");
}
