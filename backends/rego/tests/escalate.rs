//! A Rego decision `escalate` makes the engine ask for an approval. The module is a minimal
//! one following the OPA WebAssembly ABI 1.2 whose one entrypoint answers
//! `{"decision": "escalate", "reason": "ask a person"}`.

use std::time::Duration;

use portcullis_engine::{
    EngineError, Message, Metadata, PolicyDecision, PolicyEngine, PolicySet, ToolCallContext,
    ToolCallPolicy,
};
use portcullis_rego::{RegoBundle, RegoToolCallPolicy};

const WAT: &str = r#"
(module
  (import "env" "memory" (memory 2))
  (import "env" "opa_abort" (func $abort (param i32)))
  (global $heap (mut i32) (i32.const 4096))
  (global (export "opa_wasm_abi_version") i32 (i32.const 1))
  (global (export "opa_wasm_abi_minor_version") i32 (i32.const 2))
  (data (i32.const 16) "{}\00")
  (data (i32.const 256) "{\"aps/tool_call/decision\":0}\00")
  (data (i32.const 576) "[{\"result\":{\"decision\":\"escalate\",\"reason\":\"ask a person\"}}]\00")
  (func $malloc (export "opa_malloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (local.get $p) (i32.add (local.get $size) (i32.const 1))))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1)) (then (unreachable)))))
    (local.get $p))
  (func (export "opa_free") (param i32))
  (func (export "opa_json_parse") (param $addr i32) (param $len i32) (result i32)
    (i32.store8 (i32.add (local.get $addr) (local.get $len)) (i32.const 0))
    (local.get $addr))
  (func (export "opa_json_dump") (param i32) (result i32) (local.get 0))
  (func (export "opa_heap_ptr_get") (result i32) (global.get $heap))
  (func (export "opa_heap_ptr_set") (param i32) (global.set $heap (local.get 0)))
  (func (export "opa_eval_ctx_new") (result i32) (i32.const 0))
  (func (export "opa_eval_ctx_set_input") (param i32 i32))
  (func (export "opa_eval_ctx_set_data") (param i32 i32))
  (func (export "opa_eval_ctx_set_entrypoint") (param i32 i32))
  (func (export "opa_eval_ctx_get_result") (param i32) (result i32) (i32.const 576))
  (func (export "eval") (param i32) (result i32) (i32.const 0))
  (func (export "builtins") (result i32) (i32.const 16))
  (func (export "entrypoints") (result i32) (i32.const 256))
  (func (export "opa_eval")
    (param i32 i32 i32 i32 i32) (param $heap i32) (param i32) (result i32)
    (global.set $heap (local.get $heap))
    (i32.const 576))
)
"#;

fn context() -> ToolCallContext {
    ToolCallContext::new(
        "send_email",
        serde_json::Map::new(),
        Message::assistant("sending"),
        Metadata::new("agent", "session"),
    )
}

#[tokio::test]
async fn a_rego_escalation_needs_an_approval() {
    let wasm = wat::parse_str(WAT).expect("valid WAT");
    let bundle = RegoBundle::from_bytes(&wasm).expect("the module opens");
    let policy = RegoToolCallPolicy::from_bundle("rego_gate", bundle).expect("one entrypoint");
    let context = context();
    assert_eq!(
        policy.evaluate(&context).await.expect("evaluates"),
        PolicyDecision::escalate("ask a person")
    );

    let engine = PolicyEngine::builder()
        .policy_set(PolicySet::builder().tool_call(policy).build())
        .build();
    let error = engine.evaluate_tool_call(&context).await.unwrap_err();
    let EngineError::ApprovalRequired(request) = error else {
        panic!("expected an approval request, got {error:?}")
    };
    assert_eq!(request.policy_ids, ["rego_gate"]);
    assert_eq!(request.reasons, ["ask a person"]);
    engine
        .approvals()
        .grant(&request.action_digest, "alice", Duration::from_secs(60))
        .await
        .unwrap();
    engine.evaluate_tool_call(&context).await.unwrap();
}
