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

/// The networks of `addresses` (CIDRs or addresses), merged as OPA merges them.
///
/// OPA reads a bare IPv4 address as the address with its classful mask (Go's
/// `IP.DefaultMask`: `/8` below 128, `/16` below 192, `/24` above), so `"10.0.0.1"` stands for
/// all of `10.0.0.0/8`, and one that merges with nothing comes back unmasked (`"10.0.0.1/8"`).
/// A bare IPv6 address is an error. Blocks are sorted by their last address, then merged from the end
/// when one starts at most one address after the previous one ends.
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
    context.charge(items.len() * (VALUE_COST + 48), "net.cidr_merge's networks")?;
    let mut blocks = Vec::with_capacity(items.len());
    for item in items {
        context.check_time()?;
        let text = item.as_str().ok_or_else(|| {
            BuiltinError::Failed(format!(
                "operand 1 must be an array of strings, got an element of type {}",
                type_name(item)
            ))
        })?;
        blocks.push(Block::parse(text)?);
    }
    blocks.sort_by_key(|block| (block.last, block.first));
    for index in (1..blocks.len()).rev() {
        context.check_time()?;
        let (previous, current) = (&blocks[index - 1], &blocks[index]);
        // The address before the block's first, as Go's `GetPreviousIP` counts: never below
        // `0.0.0.0` or `::`.
        let before_first = if current.first == 0 || current.first == V4_MAPPED {
            current.first
        } else {
            current.first - 1
        };
        if before_first <= previous.last {
            blocks[index - 1] = Block {
                first: previous.first.min(current.first),
                last: current.last,
                unmerged: None,
            };
            blocks.remove(index);
        }
    }
    let mut merged = Vec::new();
    for block in blocks {
        context.check_time()?;
        match block.unmerged {
            Some(text) => merged.push(text),
            None => covering_networks(block.first, block.last, &mut merged),
        }
    }
    merged.sort();
    merged.dedup();
    Ok(Value::from(merged))
}

/// Where IPv4 addresses sit among IPv6 ones (`::ffff:0.0.0.0`), as OPA compares them.
const V4_MAPPED: u128 = 0xffff << 32;

/// One element of `net.cidr_merge`'s operand as OPA sees it.
#[derive(Debug)]
struct Block {
    /// Its first address, an IPv4 one mapped to IPv6.
    first: u128,
    /// Its last address, likewise.
    last: u128,
    /// How OPA prints it when it merges with nothing; `None` once merged.
    unmerged: Option<String>,
}

impl Block {
    fn parse(text: &str) -> Result<Self, BuiltinError> {
        let address = match text.parse::<IpAddr>() {
            Ok(IpAddr::V4(address)) => address,
            Ok(IpAddr::V6(address)) => address
                .to_ipv4_mapped()
                .ok_or_else(|| BuiltinError::from("IPv6 invalid: needs prefix length"))?,
            Err(_) => {
                let network = cidr(text)?.trunc();
                let (first, last) = match network {
                    IpNet::V4(net) => (
                        V4_MAPPED | u128::from(u32::from(net.network())),
                        V4_MAPPED | u128::from(u32::from(net.broadcast())),
                    ),
                    IpNet::V6(net) => (u128::from(net.network()), u128::from(net.broadcast())),
                };
                return Ok(Self {
                    first,
                    last,
                    unmerged: Some(network.to_string()),
                });
            }
        };
        let prefix = match address.octets()[0] {
            0..128 => 8,
            128..192 => 16,
            _ => 24,
        };
        let mask = u32::MAX << (32 - prefix);
        let bits = u32::from(address);
        Ok(Self {
            first: V4_MAPPED | u128::from(bits & mask),
            last: V4_MAPPED | u128::from(bits | !mask),
            unmerged: Some(format!("{address}/{prefix}")),
        })
    }
}

/// The fewest networks covering the addresses `first..=last`, each as large as its start allows,
/// IPv4 ones written as such.
fn covering_networks(mut first: u128, last: u128, out: &mut Vec<String>) {
    loop {
        let aligned = first.trailing_zeros();
        let span = last - first;
        // The largest power of two not above `span + 1`.
        let fits = if span == u128::MAX {
            128
        } else {
            127 - (span + 1).leading_zeros()
        };
        let host_bits = aligned.min(fits);
        let prefix = 128 - host_bits;
        if first >> 32 == V4_MAPPED >> 32 && prefix >= 96 {
            let address = std::net::Ipv4Addr::from(first as u32);
            out.push(format!("{address}/{}", prefix - 96));
        } else {
            out.push(format!("{}/{prefix}", std::net::Ipv6Addr::from(first)));
        }
        let size = 1u128.checked_shl(host_bits).unwrap_or(0);
        match first.checked_add(size) {
            Some(next) if size != 0 && next <= last && next > first => first = next,
            _ => return,
        }
    }
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
            Ok(json!(["10.0.0.0/8", "2001:db8::/32"]))
        );
        assert!(call("net.cidr_merge", json!([["nope"]])).is_err());
    }

    /// OPA v1.20.2 reads a bare IPv4 address with its classful mask: each line is its answer.
    #[test]
    fn bare_addresses_merge_as_in_opa() {
        let merge = |items: Value| call("net.cidr_merge", json!([items]));
        assert_eq!(
            merge(json!(["10.0.0.1", "10.0.0.2/31", "10.0.0.0/32"])),
            Ok(json!(["10.0.0.0/8"]))
        );
        assert_eq!(merge(json!(["10.0.0.1"])), Ok(json!(["10.0.0.1/8"])));
        assert_eq!(
            merge(json!(["172.16.5.4", "192.168.1.1"])),
            Ok(json!(["172.16.5.4/16", "192.168.1.1/24"]))
        );
        assert_eq!(
            merge(json!(["224.0.0.1", "225.0.0.1"])),
            Ok(json!(["224.0.0.1/24", "225.0.0.1/24"]))
        );
        assert_eq!(merge(json!(["::ffff:10.0.0.1"])), Ok(json!(["10.0.0.1/8"])));
        assert_eq!(
            merge(json!(["10.0.0.0/9", "10.128.0.0/9", "11.0.0.0/8"])),
            Ok(json!(["10.0.0.0/7"]))
        );
        assert_eq!(
            merge(json!(["10.0.0.0/32", "10.0.0.2/32"])),
            Ok(json!(["10.0.0.0/32", "10.0.0.2/32"]))
        );
        assert_eq!(
            merge(json!(["10.0.0.1/32", "10.0.0.2/32"])),
            Ok(json!(["10.0.0.1/32", "10.0.0.2/32"]))
        );
        assert_eq!(
            merge(json!(["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/30"])),
            Ok(json!(["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/30"]))
        );
        assert_eq!(merge(json!([])), Ok(json!([])));
        assert_eq!(
            merge(json!(["2001:db8::1"])),
            Err(BuiltinError::Failed(
                "IPv6 invalid: needs prefix length".into()
            ))
        );
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
