//! `net.cidr_contains` in a module compiled by OPA v1.20.2 (`tests/modules/cidr.tar.gz`, built
//! as `tests/modules/README.md` says): OPA's compiler maps `net.cidr_contains` (and
//! `net.cidr_intersects`) to functions of the module's own library, so such a module never asks
//! the host for them, and the host need not provide them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use portcullis_rego::RegoBundle;
use serde_json::{Value, json};

fn bundle() -> RegoBundle {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/modules/cidr.tar.gz");
    RegoBundle::open(path).expect("the compiled module opens")
}

#[test]
fn opa_compiles_cidr_contains_into_the_module() {
    let bundle = bundle();
    assert_eq!(bundle.host_builtins(), Vec::<String>::new());
    let evaluate = |entrypoint: &str, input: Value| {
        bundle
            .evaluate_blocking(entrypoint, &input)
            .expect("the module evaluates")
    };
    let contains = |network: &str, address: &str| {
        evaluate(
            "cidr/contains_address",
            json!({"network": network, "address": address}),
        )
    };
    // What `opa eval` answers for the same calls (an `if` rule is undefined when false).
    assert_eq!(contains("10.0.0.0/8", "10.1.2.3"), Some(json!(true)));
    assert_eq!(contains("10.0.0.0/8", "11.1.2.3"), None);
    assert_eq!(contains("10.0.0.0/8", "10.1.0.0/16"), Some(json!(true)));
    assert_eq!(contains("2001:db8::/32", "2001:db8::1"), Some(json!(true)));
    let intersects = |network: &str, other: &str| {
        evaluate(
            "cidr/intersects",
            json!({"network": network, "other": other}),
        )
    };
    assert_eq!(intersects("10.0.0.0/8", "10.255.0.0/16"), Some(json!(true)));
    assert_eq!(intersects("10.0.0.0/8", "11.0.0.0/8"), None);
}
