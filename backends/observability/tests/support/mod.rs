//! Shared by the tests: the receiver, and the engine producing every kind of record (the
//! `otel` tests' policies).

#![allow(dead_code, unreachable_pub)]

pub mod receiver;

#[path = "../../../otel/tests/support/mod.rs"]
pub mod policies;

use std::time::SystemTime;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;

/// The spans of every request, with their resource's `service.name` and scope name.
pub fn spans(requests: &[receiver::Received]) -> Vec<(String, String, Span)> {
    let mut spans = Vec::new();
    for request in requests {
        for resource_spans in request.decode().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| string(&resource.attributes, "service.name"))
                .unwrap_or_default();
            for scope_spans in resource_spans.scope_spans {
                let scope = scope_spans
                    .scope
                    .as_ref()
                    .map(|scope| scope.name.clone())
                    .unwrap_or_default();
                for span in scope_spans.spans {
                    spans.push((service.clone(), scope.clone(), span));
                }
            }
        }
    }
    spans
}

pub fn value<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|value: &AnyValue| value.value.as_ref())
}

pub fn string(attributes: &[KeyValue], key: &str) -> Option<String> {
    value(attributes, key).map(|value| match value {
        any_value::Value::StringValue(text) => text.clone(),
        other => panic!("{key} is not a string: {other:?}"),
    })
}

pub fn nanos(time: SystemTime) -> u64 {
    let since_epoch = time.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    u64::try_from(since_epoch.as_nanos()).unwrap()
}

/// A port on 127.0.0.1 where nothing listens.
pub fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
