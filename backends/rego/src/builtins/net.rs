//! Networks: `net.cidr_is_valid`, `net.cidr_expand`, `net.cidr_merge`. (`net.cidr_contains`
//! and `net.cidr_intersects` are compiled into OPA modules.)
//!
//! OPA answers sets for `net.cidr_expand` and `net.cidr_merge`; a host builtin answers JSON,
//! so they come as arrays, in the order of OPA's sets (sorted as strings).

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use super::{
    BuiltinContext, BuiltinError, HostBuiltin, Outcome, VALUE_COST, arg, string, type_name,
};

pub(super) const TABLE: &[HostBuiltin] = &[
    HostBuiltin {
        name: "net.cidr_is_valid",
        func: |args, _| {
            Ok(Value::Bool(
                arg(args, 0)?
                    .as_str()
                    .is_some_and(|cidr| cidr.parse::<IpNet>().is_ok()),
            ))
        },
    },
    HostBuiltin {
        name: "net.cidr_expand",
        func: cidr_expand,
    },
    HostBuiltin {
        name: "net.cidr_merge",
        func: cidr_merge,
    },
];

fn cidr(text: &str) -> Result<IpNet, BuiltinError> {
    text.parse::<IpNet>()
        .map_err(|_| BuiltinError::Failed(format!("invalid CIDR address: {text}")))
}

/// Every address of the network, sorted as OPA sorts a set of strings.
fn cidr_expand(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let network = cidr(string(args, 0)?)?;
    let host_bits = u32::from(network.max_prefix_len() - network.prefix_len());
    let count = 1u128.checked_shl(host_bits).unwrap_or(u128::MAX);
    // Each address: a value and up to 39 characters.
    let cost = count.saturating_mul(u128::try_from(VALUE_COST + 40).unwrap_or(u128::MAX));
    context.charge(
        usize::try_from(cost).unwrap_or(usize::MAX),
        "net.cidr_expand's addresses",
    )?;
    let mut addresses = Vec::new();
    for address in network.hosts_all() {
        context.check_time()?;
        addresses.push(address.to_string());
    }
    addresses.sort();
    Ok(Value::from(addresses))
}

/// The networks of `addresses` (CIDRs or addresses), merged into the fewest networks.
fn cidr_merge(args: &[Value], context: &mut BuiltinContext) -> Outcome {
    let items = match arg(args, 0)? {
        Value::Array(items) => items,
        other => {
            return Err(BuiltinError::Failed(format!(
                "operand 1 must be an array of strings, got {}",
                type_name(other)
            )));
        }
    };
    let mut networks = Vec::with_capacity(items.len());
    for item in items {
        context.check_time()?;
        let text = item.as_str().ok_or_else(|| {
            BuiltinError::Failed(format!(
                "operand 1 must be an array of strings, got an element of type {}",
                type_name(item)
            ))
        })?;
        let network = match text.parse::<IpAddr>() {
            Ok(address) => IpNet::from(address),
            Err(_) => cidr(text)?.trunc(),
        };
        networks.push(network);
    }
    context.charge(
        networks.len() * (VALUE_COST + 48),
        "net.cidr_merge's networks",
    )?;
    let mut merged: Vec<String> = IpNet::aggregate(&networks)
        .iter()
        .map(ToString::to_string)
        .collect();
    merged.sort();
    Ok(Value::from(merged))
}

/// `hosts_all`: every address of a network, network and broadcast addresses included.
trait AllHosts {
    fn hosts_all(&self) -> Box<dyn Iterator<Item = IpAddr>>;
}

impl AllHosts for IpNet {
    fn hosts_all(&self) -> Box<dyn Iterator<Item = IpAddr>> {
        match self {
            IpNet::V4(net) => {
                Box::new(ipnet::Ipv4AddrRange::new(net.network(), net.broadcast()).map(IpAddr::V4))
            }
            IpNet::V6(net) => {
                Box::new(ipnet::Ipv6AddrRange::new(net.network(), net.broadcast()).map(IpAddr::V6))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> Outcome {
        let Value::Array(args) = args else {
            unreachable!()
        };
        let builtin = TABLE.iter().find(|b| b.name == name).expect(name);
        (builtin.func)(&args, &mut BuiltinContext::default())
    }

    /// The examples of OPA's documentation.
    #[test]
    fn networks_answer_as_opa_does() {
        assert_eq!(
            call("net.cidr_is_valid", json!(["192.168.0.0/24"])),
            Ok(json!(true))
        );
        assert_eq!(
            call("net.cidr_is_valid", json!(["2001:db8::/32"])),
            Ok(json!(true))
        );
        assert_eq!(
            call("net.cidr_is_valid", json!(["192.168.0.0/33"])),
            Ok(json!(false))
        );
        assert_eq!(
            call("net.cidr_is_valid", json!(["192.168.0.0"])),
            Ok(json!(false))
        );
        assert_eq!(
            call("net.cidr_expand", json!(["192.168.0.0/30"])),
            Ok(json!([
                "192.168.0.0",
                "192.168.0.1",
                "192.168.0.2",
                "192.168.0.3"
            ]))
        );
        assert_eq!(
            call(
                "net.cidr_merge",
                json!([["192.0.128.0/24", "192.0.129.0/24"]])
            ),
            Ok(json!(["192.0.128.0/23"]))
        );
        assert_eq!(
            call(
                "net.cidr_merge",
                json!([[
                    "10.0.0.1",
                    "10.0.0.0",
                    "10.0.1.0/24",
                    "2001:db8::/33",
                    "2001:db8:8000::/33"
                ]])
            ),
            Ok(json!(["10.0.0.0/31", "10.0.1.0/24", "2001:db8::/32"]))
        );
        assert!(call("net.cidr_merge", json!([["nope"]])).is_err());
    }

    #[test]
    fn a_huge_expansion_is_refused_up_front() {
        let mut context = BuiltinContext::new(64 << 20, u64::MAX, |_| false);
        context.begin_call();
        let error = cidr_expand(&[json!("2001:db8::/64")], &mut context);
        assert!(
            matches!(error, Err(BuiltinError::MemoryLimit(_))),
            "{error:?}"
        );
    }
}
