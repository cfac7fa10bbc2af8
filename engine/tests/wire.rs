//! Wire shapes: serialized contexts and decisions validate against the normative JSON Schemas
//! in `../shared/schemas/v0.1.0/`, and invalid input is rejected on deserialize.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;

use boon::{Compiler, SchemaIndex, Schemas};
use portcullis_engine::{
    InputContext, Message, OutputContext, PolicyDecision, Redaction, Role, ToolCallContext,
    ToolResultContext, TransformOperation,
};
use serde_json::{Value, json};
use support::*;

const BASE_URL: &str = "https://agentpolicyspecification.github.io/schemas/v0.1.0/";

fn schema_dir() -> PathBuf {
    let dir = std::env::var_os("PORTCULLIS_SCHEMAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/schemas/v0.1.0")
        });
    assert!(
        dir.join("base.schema.json").is_file(),
        "the JSON Schemas were not found in {} (set PORTCULLIS_SCHEMAS to their folder)",
        dir.display()
    );
    dir
}

struct Validator {
    schemas: Schemas,
    input: SchemaIndex,
    tool_call: SchemaIndex,
    output: SchemaIndex,
    decision: SchemaIndex,
}

impl Validator {
    fn load() -> Self {
        let dir = schema_dir();
        let mut compiler = Compiler::new();
        for name in [
            "base",
            "input-context",
            "tool-call-context",
            "output-context",
            "policy-decision",
        ] {
            let file = dir.join(format!("{name}.schema.json"));
            let text = std::fs::read_to_string(&file).unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            compiler
                .add_resource(&format!("{BASE_URL}{name}.schema.json"), value)
                .unwrap();
        }
        compiler.enable_format_assertions();
        let mut schemas = Schemas::new();
        let mut compile = |name: &str| {
            compiler
                .compile(&format!("{BASE_URL}{name}.schema.json"), &mut schemas)
                .unwrap_or_else(|error| panic!("{name}: {error}"))
        };
        let input = compile("input-context");
        let tool_call = compile("tool-call-context");
        let output = compile("output-context");
        let decision = compile("policy-decision");
        Validator {
            schemas,
            input,
            tool_call,
            output,
            decision,
        }
    }

    fn check(&self, index: SchemaIndex, value: &Value) -> Result<(), String> {
        self.schemas
            .validate(value, index)
            .map_err(|error| format!("{error:#}"))
    }
}

fn all_decisions() -> Vec<PolicyDecision> {
    vec![
        PolicyDecision::allow(),
        PolicyDecision::Allow {
            audit: true,
            labels: Vec::new(),
        },
        PolicyDecision::deny("nope"),
        PolicyDecision::deny_silently(),
        PolicyDecision::Deny {
            reason: Some("r".into()),
            policy_id: Some("p".into()),
        },
        PolicyDecision::audit("note"),
        PolicyDecision::Audit {
            reason: None,
            labels: Vec::new(),
        },
        PolicyDecision::redact([
            Redaction::mask("messages.0.content"),
            Redaction::remove("metadata.tenant"),
            Redaction::replace("messages.1.content", r"\d+").with_replacement("#"),
        ]),
        PolicyDecision::transform([
            TransformOperation::set("arguments.limit", 3),
            TransformOperation::prepend("response.content", "> "),
            TransformOperation::append("response.content", "."),
        ]),
    ]
}

#[test]
fn serialized_contexts_validate_against_the_schemas() {
    let validator = Validator::load();
    let contexts = [
        (
            validator.input,
            serde_json::to_value(input(&["s", "u"])).unwrap(),
        ),
        (
            validator.tool_call,
            serde_json::to_value(tool_call("search", sample_arguments())).unwrap(),
        ),
        (
            validator.output,
            serde_json::to_value(output("answer")).unwrap(),
        ),
    ];
    for (index, value) in &contexts {
        validator
            .check(*index, value)
            .unwrap_or_else(|error| panic!("{value}: {error}"));
    }
    // The validator does reject what it should (so the checks above mean something).
    let mut broken = contexts[0].1.clone();
    broken["messages"][0]["role"] = json!("robot");
    assert!(validator.check(validator.input, &broken).is_err());
    let mut broken = contexts[2].1.clone();
    broken["response"]["role"] = json!("user");
    assert!(validator.check(validator.output, &broken).is_err());
}

#[test]
fn serialized_decisions_validate_against_the_schema() {
    let validator = Validator::load();
    for decision in all_decisions() {
        let value = serde_json::to_value(&decision).unwrap();
        validator
            .check(validator.decision, &value)
            .unwrap_or_else(|error| panic!("{value}: {error}"));
        let back: PolicyDecision = serde_json::from_value(value).unwrap();
        assert_eq!(back, decision);
    }
    assert!(
        validator
            .check(
                validator.decision,
                &json!({"decision": "redact", "redactions": []})
            )
            .is_err()
    );
}

#[test]
fn decisions_have_their_wire_shape() {
    assert_eq!(
        serde_json::to_value(PolicyDecision::allow()).unwrap(),
        json!({"decision": "allow"})
    );
    assert_eq!(
        serde_json::to_value(PolicyDecision::deny("x")).unwrap(),
        json!({"decision": "deny", "reason": "x"})
    );
    assert_eq!(
        serde_json::to_value(PolicyDecision::transform([TransformOperation::set("a", 1)])).unwrap(),
        json!({"decision": "transform", "transformation": {"operations": [{"op": "set", "field": "a", "value": 1}]}})
    );
}

#[test]
fn unknown_decisions_and_bad_shapes_are_rejected() {
    for bad in [
        json!({"decision": "maybe"}),
        json!({"decision": "ALLOW"}),
        json!({}),
        json!({"decision": "redact"}),
        json!({"decision": "redact", "redactions": []}),
        json!({"decision": "redact", "redactions": [{"field": "a", "strategy": "blur"}]}),
        json!({"decision": "transform", "transformation": {"operations": [{"op": "delete", "field": "a", "value": 1}]}}),
        json!({"decision": "deny", "reason": 5}),
        json!("allow"),
    ] {
        assert!(
            serde_json::from_value::<PolicyDecision>(bad.clone()).is_err(),
            "{bad} was accepted"
        );
    }
}

#[test]
fn bad_roles_and_unknown_fields_are_rejected() {
    let bad_role = json!({"messages": [{"role": "robot", "content": "x"}],
        "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"}});
    let error = serde_json::from_value::<InputContext>(bad_role).unwrap_err();
    assert!(error.to_string().contains("robot"), "{error}");

    let extra_field = json!({"response": {"role": "assistant", "content": "x", "mood": "happy"},
        "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"}});
    assert!(serde_json::from_value::<OutputContext>(extra_field).is_err());

    let missing = json!({"tool_name": "t", "arguments": {}, "calling_message": {"role": "assistant", "content": ""},
        "metadata": {"agent_id": "a", "timestamp": "2026-01-01T00:00:00Z"}});
    let error = serde_json::from_value::<ToolCallContext>(missing).unwrap_err();
    assert!(error.to_string().contains("session_id"), "{error}");

    let not_object = json!({"tool_name": "t", "arguments": [1], "calling_message": {"role": "assistant", "content": ""},
        "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"}});
    assert!(serde_json::from_value::<ToolCallContext>(not_object).is_err());
}

#[test]
fn extra_metadata_keys_round_trip() {
    let text = r#"{"response":{"role":"assistant","content":"hi"},"metadata":{"agent_id":"a","session_id":"s","timestamp":"2026-01-01T00:00:00Z","tenant":"acme","trace":{"id":[1,2,3]},"flag":null}}"#;
    let context: OutputContext = serde_json::from_str(text).unwrap();
    assert_eq!(context.metadata.extra["tenant"], json!("acme"));
    assert_eq!(context.response, Message::new(Role::Assistant, "hi"));
    let back: Value = serde_json::to_value(&context).unwrap();
    assert_eq!(back, serde_json::from_str::<Value>(text).unwrap());
}

#[test]
fn metadata_fields_are_read_once_and_as_strings() {
    let output = |metadata: &str| {
        let text = format!(
            r#"{{"response":{{"role":"assistant","content":"hi"}},"metadata":{metadata}}}"#
        );
        serde_json::from_str::<OutputContext>(&text).map_err(|error| error.to_string())
    };
    let twice = output(r#"{"agent_id":"a","session_id":"s","agent_id":"b","timestamp":"t"}"#);
    assert!(twice.unwrap_err().contains("duplicate field `agent_id`"));
    let number = output(r#"{"agent_id":"a","session_id":5,"timestamp":"t"}"#);
    assert!(number.unwrap_err().contains("expected a string"));
    for missing in ["agent_id", "session_id", "timestamp"] {
        let mut fields = json!({"agent_id": "a", "session_id": "s", "timestamp": "t"});
        fields.as_object_mut().unwrap().remove(missing);
        let error = output(&fields.to_string()).unwrap_err();
        assert!(
            error.contains(&format!("missing field `{missing}`")),
            "{error}"
        );
    }
    let not_a_map = output(r#"["a","s","t"]"#).unwrap_err();
    assert!(not_a_map.contains("struct Metadata"), "{not_a_map}");
    // An extra key given twice keeps its last value, as any JSON object does.
    let last = output(r#"{"agent_id":"a","session_id":"s","timestamp":"t","k":1,"k":2}"#).unwrap();
    assert_eq!(last.metadata.extra["k"], json!(2));
}

#[test]
fn wire_names_of_points_and_roles() {
    use portcullis_engine::InterceptionPoint;
    for (point, name) in [
        (InterceptionPoint::Input, "input"),
        (InterceptionPoint::ToolCall, "tool_call"),
        (InterceptionPoint::ToolResult, "tool_result"),
        (InterceptionPoint::Output, "output"),
    ] {
        assert_eq!(point.as_str(), name);
        assert_eq!(serde_json::to_value(point).unwrap(), json!(name));
        assert_eq!(
            serde_json::from_value::<InterceptionPoint>(json!(name)).unwrap(),
            point
        );
    }
    assert_eq!(serde_json::to_value(Role::System).unwrap(), json!("system"));
}

#[test]
fn a_point_is_parsed_from_its_wire_name_and_nothing_else() {
    use portcullis_engine::InterceptionPoint;
    assert_eq!(InterceptionPoint::ALL.len(), 4);
    for point in InterceptionPoint::ALL {
        assert_eq!(InterceptionPoint::from_name(point.as_str()), Some(point));
        assert_eq!(point.as_str().parse::<InterceptionPoint>(), Ok(point));
    }
    // No default point for a name that is not one: each of these is refused, not read as
    // `input`.
    for name in [
        "",
        "Input",
        "INPUT",
        " input",
        "input ",
        "tool-call",
        "toolcall",
        "outputs",
        "all",
    ] {
        assert_eq!(InterceptionPoint::from_name(name), None, "{name:?}");
        let error = name.parse::<InterceptionPoint>().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("input, tool_call, tool_result and output"),
            "{error}"
        );
    }
}

/// The keys `value` serializes to, sorted.
fn keys(value: &impl serde::Serialize) -> Vec<String> {
    let Value::Object(map) = serde_json::to_value(value).expect("serializable") else {
        panic!("not an object");
    };
    let mut keys: Vec<String> = map.keys().cloned().collect();
    keys.sort();
    keys
}

/// The property names a schema (or one of the base schema's definitions) gives an object.
fn schema_properties(file: &str, definition: Option<&str>) -> Vec<String> {
    let text = std::fs::read_to_string(schema_dir().join(file)).expect("a readable schema");
    let schema: Value = serde_json::from_str(&text).expect("a JSON schema");
    let object = match definition {
        Some(name) => &schema["$defs"][name],
        None => &schema,
    };
    property_names(object)
}

/// The property names of a schema object, sorted.
fn property_names(object: &Value) -> Vec<String> {
    let mut names: Vec<String> = object["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

/// The one description of each context's JSON shape that the others are checked against.
///
/// Each context is destructured without `..`: a new field does not compile until this test
/// names it, and then its serialized key. When it fails, the other places that know the
/// shape must learn the field too: the Rego input writer (`backends/rego/src/input.rs`), the
/// DSL's selectors and schema (`dsl/src/select.rs`, `dsl/src/schema.rs`), and the JSON
/// Schemas.
#[test]
fn every_field_of_every_context_is_known() {
    let metadata = portcullis_engine::Metadata::new("agent", "session").with_extra("tenant", "a");
    let portcullis_engine::Metadata {
        agent_id: _,
        session_id: _,
        timestamp: _,
        extra: _,
    } = &metadata;
    // Extra keys sit beside the three fields.
    assert_eq!(
        keys(&metadata),
        ["agent_id", "session_id", "tenant", "timestamp"]
    );

    let message = Message::user("hi");
    let Message { role, content: _ } = &message;
    match role {
        Role::System | Role::User | Role::Assistant => {}
    }
    assert_eq!(keys(&message), ["content", "role"]);

    let input = InputContext::new(vec![message.clone()], metadata.clone());
    let InputContext {
        messages: _,
        metadata: _,
    } = &input;
    assert_eq!(keys(&input), ["messages", "metadata"]);

    let call = ToolCallContext::new(
        "search",
        serde_json::Map::new(),
        Message::assistant("calling"),
        metadata.clone(),
    );
    let ToolCallContext {
        tool_name: _,
        arguments: _,
        calling_message: _,
        metadata: _,
    } = &call;
    assert_eq!(
        keys(&call),
        ["arguments", "calling_message", "metadata", "tool_name"]
    );

    let result = ToolResultContext::new(
        "web_fetch",
        serde_json::Map::new(),
        "page",
        metadata.clone(),
    )
    .with_structured(json!({"rows": []}));
    let ToolResultContext {
        tool_name: _,
        arguments: _,
        content: _,
        structured: _,
        is_error: _,
        metadata: _,
    } = &result;
    assert_eq!(
        keys(&result),
        [
            "arguments",
            "content",
            "is_error",
            "metadata",
            "structured",
            "tool_name"
        ]
    );

    let output = OutputContext::new(Message::assistant("answer"), metadata);
    let OutputContext {
        response: _,
        metadata: _,
    } = &output;
    assert_eq!(keys(&output), ["metadata", "response"]);

    // The normative schemas name the same fields.
    assert_eq!(
        schema_properties("base.schema.json", Some("Metadata")),
        ["agent_id", "session_id", "timestamp"]
    );
    assert_eq!(
        schema_properties("base.schema.json", Some("Message")),
        keys(&Message::user("x"))
    );
    assert_eq!(
        schema_properties("input-context.schema.json", None),
        keys(&input)
    );
    assert_eq!(
        schema_properties("tool-call-context.schema.json", None),
        keys(&call)
    );
    assert_eq!(
        schema_properties("output-context.schema.json", None),
        keys(&output)
    );
    assert_eq!(
        project_schema_properties("tool-result-context"),
        keys(&result)
    );
}

/// The project's own schemas (the Portcullis extensions of the specification).
fn project_schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemas")
}

fn project_schema(name: &str) -> Value {
    let file = project_schema_dir().join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
    serde_json::from_str(&text).expect("a JSON schema")
}

fn project_schema_properties(name: &str) -> Vec<String> {
    property_names(&project_schema(name))
}

/// `tool-result-context.schema.json`, compiled with the specification's base schema it uses.
fn tool_result_validator() -> (Schemas, SchemaIndex) {
    let mut compiler = Compiler::new();
    let base = std::fs::read_to_string(schema_dir().join("base.schema.json")).unwrap();
    compiler
        .add_resource(
            &format!("{BASE_URL}base.schema.json"),
            serde_json::from_str::<Value>(&base).unwrap(),
        )
        .unwrap();
    let schema = project_schema("tool-result-context");
    let id = schema["$id"].as_str().expect("an $id").to_owned();
    compiler.add_resource(&id, schema).unwrap();
    compiler.enable_format_assertions();
    let mut schemas = Schemas::new();
    let index = compiler.compile(&id, &mut schemas).unwrap();
    (schemas, index)
}

#[test]
fn serialized_tool_results_validate_against_their_schema() {
    let (schemas, index) = tool_result_validator();
    let Value::Object(arguments) = sample_arguments() else {
        unreachable!()
    };
    let plain = ToolResultContext::new("web_fetch", arguments, "<p>page</p>", metadata());
    let full = plain
        .clone()
        .with_structured(json!({"rows": [1, "two", null]}))
        .with_error(true);
    for context in [&plain, &full] {
        let value = serde_json::to_value(context).unwrap();
        schemas
            .validate(&value, index)
            .unwrap_or_else(|error| panic!("{value}: {error:#}"));
        let back: ToolResultContext = serde_json::from_value(value).unwrap();
        assert_eq!(&back, context);
    }
    // The validator rejects what deserializing rejects.
    let mut broken = serde_json::to_value(&plain).unwrap();
    broken["is_error"] = json!("false");
    assert!(schemas.validate(&broken, index).is_err());
    let mut broken = serde_json::to_value(&plain).unwrap();
    broken.as_object_mut().unwrap().remove("tool_name");
    assert!(schemas.validate(&broken, index).is_err());
    // The optional fields may be left out.
    let short = json!({"tool_name": "t", "content": "",
        "metadata": {"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"}});
    schemas.validate(&short, index).unwrap();
    let read: ToolResultContext = serde_json::from_value(short).unwrap();
    assert!(read.arguments.is_empty() && !read.is_error && read.structured.is_none());
}

#[test]
fn a_tool_result_without_a_tool_name_or_with_a_non_boolean_is_error_is_refused() {
    let metadata = json!({"agent_id": "a", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z"});
    let missing = json!({"content": "x", "metadata": metadata});
    let error = serde_json::from_value::<ToolResultContext>(missing).unwrap_err();
    assert!(
        error.to_string().contains("missing field `tool_name`"),
        "{error}"
    );
    for bad in [json!("false"), json!(0), json!(null), json!([true])] {
        let context =
            json!({"tool_name": "t", "content": "x", "is_error": bad, "metadata": metadata});
        let error = serde_json::from_value::<ToolResultContext>(context).unwrap_err();
        assert!(
            error.to_string().contains("`is_error` must be a boolean"),
            "{bad}: {error}"
        );
    }
    let unknown = json!({"tool_name": "t", "content": "x", "output": "y", "metadata": metadata});
    assert!(serde_json::from_value::<ToolResultContext>(unknown).is_err());
}

#[test]
fn labels_round_trip_on_every_decision_but_deny() {
    let labelled = [
        PolicyDecision::allow().with_labels(["untrusted", "web"]),
        PolicyDecision::audit("a").with_labels(["seen"]),
        PolicyDecision::redact([Redaction::mask("messages.0.content")]).with_labels(["pii"]),
        PolicyDecision::transform([TransformOperation::set("arguments.limit", 3)])
            .with_labels(["rewritten"]),
    ];
    for decision in labelled {
        let json = serde_json::to_value(&decision).unwrap();
        assert!(json["labels"].is_array(), "{json}");
        let back: PolicyDecision = serde_json::from_value(json).unwrap();
        assert_eq!(back, decision);
    }
    let read: PolicyDecision =
        serde_json::from_str(r#"{"decision":"allow","labels":["untrusted"]}"#).unwrap();
    assert_eq!(read.labels(), ["untrusted"]);
    // No labels: nothing on the wire, so label-less decisions keep their schema shape.
    assert_eq!(
        serde_json::to_string(&PolicyDecision::allow()).unwrap(),
        r#"{"decision":"allow"}"#
    );
    // A deny carries none: `labels` on a deny is ignored like any unknown key.
    let deny: PolicyDecision =
        serde_json::from_str(r#"{"decision":"deny","labels":["x"]}"#).unwrap();
    assert!(deny.labels().is_empty());
}
