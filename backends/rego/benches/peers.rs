//! Rego in process against its peers, side by side in one run: the `opa-wasm` crate on the same
//! OPA-built bundle and input, and regorus' compiled policy (`compile_with_entrypoint`) on the
//! same policy's Rego source.
//!
//! Run with `cargo bench -p portcullis-rego --bench peers`. Reads the OPA-built fixtures from
//! `$PORTCULLIS_OPA_FIXTURES`, else `../shared/fixtures` beside the workspace.
//!
//! Every side starts from the same policy context and ends with a `PolicyDecision`:
//! - Portcullis: `RegoToolCallPolicy` / `RegoInputPolicy` through the policy trait's `evaluate`,
//!   time and memory limits on (the defaults);
//! - `opa-wasm`: `Policy::evaluate` on its own default engine, the context serialized by the
//!   crate, the result read as a decision by the same reader;
//! - regorus: the context converted to a regorus value, `CompiledPolicy::eval_with_input`, the
//!   result read as a decision by the same reader. The row "regorus, input prepared" hands it a
//!   value made once, so it times the evaluation alone.
//!
//! The machine may be busy: the sides run in alternating batches of about 2 ms each (the order
//! rotating from round to round), and the ratios reported are medians of the per-round ratios,
//! so that a burst of load slows both sides of a round alike. Goals: approved-tools at least
//! 2.0x `opa-wasm` and 6x regorus; no-ssn-input (a regular expression) at least 10x `opa-wasm`.
//!
//! `-- --rounds N` sets the number of rounds (default 31). `-- --only <side> <iterations>` runs
//! one side alone (`portcullis-tools`, `opa-wasm-tools`, `regorus-tools`, `portcullis-ssn`,
//! `opa-wasm-ssn`), for a profiler: `valgrind --tool=callgrind` counts instructions the same
//! whatever the load.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::hint::black_box;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use portcullis_engine::{
    InputContext, Message, Metadata, Policy, PolicyDecision, Role, ToolCallContext,
};
use portcullis_rego::{RegoInputPolicy, RegoToolCallPolicy};
use serde_json::json;

/// The approved-tools policy as Rego, deciding what `approved-tools.tar.gz` decides.
const APPROVED_TOOLS_REGO: &str = r#"
package aps.tool_call

import rego.v1

approved_tools := {"web_search", "read_file", "summarize"}

default decision := {"decision": "deny", "reason": "Tool is not in the approved list."}

decision := {"decision": "allow"} if input.tool_name in approved_tools
"#;

/// The no-ssn-input policy as Rego, deciding what `no-ssn-input.tar.gz` decides.
const NO_SSN_REGO: &str = r#"
package aps.input

import rego.v1

default decision := {"decision": "allow"}

decision := {"decision": "deny", "reason": "Message contains a potential SSN."} if {
    some message in input.messages
    regex.match(`\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b`, message.content)
}
"#;

fn fixture(relative: &str) -> PathBuf {
    let dir = match std::env::var_os("PORTCULLIS_OPA_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    let path = dir.join(relative);
    assert!(
        path.is_file(),
        "fixture {} is missing: set PORTCULLIS_OPA_FIXTURES to the folder holding rego-wasm/",
        path.display()
    );
    path
}

/// The bytes of `/policy.wasm` in a bundle.
fn bundle_wasm(relative: &str) -> Vec<u8> {
    let file = std::fs::File::open(fixture(relative)).expect("bundle opens");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    for entry in archive.entries().expect("a tar archive") {
        let mut entry = entry.expect("an entry");
        let path = entry.path().expect("a path").to_string_lossy().into_owned();
        if path.trim_start_matches('/') == "policy.wasm" {
            let mut wasm = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut wasm).expect("readable");
            return wasm;
        }
    }
    panic!("{relative} has no /policy.wasm");
}

/// Polls a future that never waits (every side here completes on its first poll).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the evaluation waited"),
    }
}

fn metadata() -> Metadata {
    Metadata::new("agent-7", "session-42").with_timestamp("2026-01-01T00:00:00Z")
}

fn tool_call(tool: &str) -> ToolCallContext {
    let mut arguments = serde_json::Map::new();
    arguments.insert("query".into(), json!("rust webassembly"));
    ToolCallContext::new(
        tool,
        arguments,
        Message::new(Role::Assistant, "let me search"),
        metadata(),
    )
}

fn messages(user: &str) -> InputContext {
    InputContext::new(
        vec![
            Message::new(Role::System, "You are a helpful assistant."),
            Message::new(Role::User, user),
        ],
        metadata(),
    )
}

/// The `opa-wasm` crate's policy on its own store and engine, as its documentation sets it up.
struct OpaWasm {
    store: wasmtime::Store<()>,
    policy: opa_wasm::Policy<opa_wasm::DefaultContext>,
    entrypoint: &'static str,
}

impl OpaWasm {
    fn new(bundle: &str, entrypoint: &'static str) -> Self {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, bundle_wasm(bundle)).expect("compiles");
        let mut store = wasmtime::Store::new(&engine, ());
        let runtime = ready(opa_wasm::Runtime::new(&mut store, &module)).expect("instantiates");
        let policy = ready(runtime.without_data(&mut store)).expect("data");
        Self {
            store,
            policy,
            entrypoint,
        }
    }

    fn decide(&mut self, input: &impl serde::Serialize) -> PolicyDecision {
        let results: serde_json::Value = ready(self.policy.evaluate(
            &mut self.store,
            self.entrypoint,
            input,
        ))
        .expect("evaluates");
        let result = results
            .get(0)
            .and_then(|entry| entry.get("result"))
            .cloned()
            .expect("defined");
        portcullis_rego::decision::read_decision(self.entrypoint, result).expect("a decision")
    }
}

/// regorus' compiled policy.
struct Regorus {
    policy: regorus::CompiledPolicy,
    rule: &'static str,
}

impl Regorus {
    fn new(source: &str, rule: &'static str) -> Self {
        let mut engine = regorus::Engine::new();
        engine
            .add_policy("policy.rego".to_owned(), source.to_owned())
            .expect("the Rego parses");
        let policy = engine
            .compile_with_entrypoint(&regorus::Rc::from(rule))
            .expect("compiles");
        Self { policy, rule }
    }

    /// The context as a regorus value, as a policy type wrapping regorus would make it.
    fn input(context: &impl serde::Serialize) -> regorus::Value {
        let json = serde_json::to_string(context).expect("serializes");
        regorus::Value::from_json_str(&json).expect("a value")
    }

    fn decide_value(&self, input: regorus::Value) -> PolicyDecision {
        let result = self.policy.eval_with_input(input).expect("evaluates");
        let document = serde_json::to_value(&result).expect("JSON");
        portcullis_rego::decision::read_decision(self.rule, document).expect("a decision")
    }

    fn decide(&self, context: &impl serde::Serialize) -> PolicyDecision {
        self.decide_value(Self::input(context))
    }
}

/// One side of a comparison: runs its evaluation `n` times.
struct Side<'a> {
    name: &'static str,
    run: Box<dyn FnMut(u64) + 'a>,
}

impl<'a> Side<'a> {
    fn new(name: &'static str, mut once: impl FnMut() + 'a) -> Self {
        Self {
            name,
            run: Box::new(move |n| {
                for _ in 0..n {
                    once();
                }
            }),
        }
    }

    /// Nanoseconds per evaluation over a batch of `n`.
    fn batch(&mut self, n: u64) -> f64 {
        let start = Instant::now();
        (self.run)(n);
        start.elapsed().as_nanos() as f64 / n as f64
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

fn show(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Runs `ours` and every peer in alternating batches and prints each peer's time as a multiple
/// of ours (the median of the per-round ratios, with the lowest and highest round).
fn compare(workload: &str, rounds: usize, mut sides: Vec<Side<'_>>) {
    // Warm up, then size the batches so that one of ours takes about 2 ms.
    for side in &mut sides {
        side.batch(200);
    }
    let per = sides[0].batch(2000).max(1.0);
    let n = ((2_000_000.0 / per) as u64).clamp(10, 1_000_000);
    let count = sides.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); count];
    for round in 0..rounds {
        for offset in 0..count {
            let index = (round + offset) % count;
            let ns = sides[index].batch(n);
            times[index].push(ns);
        }
    }
    let mut ours = times[0].clone();
    println!(
        "{workload}: {} {} per evaluation ({rounds} rounds of {n})",
        sides[0].name,
        show(median(&mut ours))
    );
    for (index, side) in sides.iter().enumerate().skip(1) {
        let mut ratios: Vec<f64> = times[index]
            .iter()
            .zip(&times[0])
            .map(|(peer, ours)| peer / ours)
            .collect();
        let ratio = median(&mut ratios);
        let (low, high) = (ratios[0], ratios[ratios.len() - 1]);
        let mut peer = times[index].clone();
        println!(
            "  {:<26} {:>10}  {ratio:.2}x ours (rounds {low:.2}x to {high:.2}x)",
            side.name,
            show(median(&mut peer)),
        );
    }
}

/// Runs one side alone `n` times, making only what it needs (for a profiler).
fn run_only(side: &str, n: u64) {
    let call = tool_call("web_search");
    let input = messages("Please summarize the attached quarterly report for me.");
    let mut once: Box<dyn FnMut()> = match side {
        "portcullis-tools" => {
            let tools = RegoToolCallPolicy::new(
                "approved-tools",
                fixture("rego-wasm/approved-tools.tar.gz"),
            )
            .expect("opens");
            Box::new(move || {
                black_box(ready(tools.evaluate(black_box(&call))).ok());
            })
        }
        "opa-wasm-tools" => {
            let mut opa = OpaWasm::new("rego-wasm/approved-tools.tar.gz", "aps/tool_call/decision");
            Box::new(move || {
                black_box(opa.decide(black_box(&call)));
            })
        }
        "regorus-tools" => {
            let regorus = Regorus::new(APPROVED_TOOLS_REGO, "data.aps.tool_call.decision");
            Box::new(move || {
                black_box(regorus.decide(black_box(&call)));
            })
        }
        "portcullis-ssn" => {
            let ssn = RegoInputPolicy::new("no-ssn", fixture("rego-wasm/no-ssn-input.tar.gz"))
                .expect("opens");
            Box::new(move || {
                black_box(ready(ssn.evaluate(black_box(&input))).ok());
            })
        }
        "opa-wasm-ssn" => {
            let mut opa = OpaWasm::new("rego-wasm/no-ssn-input.tar.gz", "aps/input/decision");
            Box::new(move || {
                black_box(opa.decide(black_box(&input)));
            })
        }
        other => panic!("unknown side {other}"),
    };
    let start = Instant::now();
    for _ in 0..n {
        once();
    }
    println!(
        "{side}: {} per evaluation",
        show(start.elapsed().as_nanos() as f64 / n as f64)
    );
}

fn main() {
    let mut rounds = 31usize;
    let mut only: Option<(String, u64)> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--rounds N");
            }
            "--only" => {
                let side = args.next().expect("--only <side> <iterations>");
                let n = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--only <side> <iterations>");
                only = Some((side, n));
            }
            // `cargo bench` passes `--bench`; a filter is not used.
            _ => {}
        }
    }

    if let Some((side, n)) = only {
        run_only(&side, n);
        return;
    }

    let tools =
        RegoToolCallPolicy::new("approved-tools", fixture("rego-wasm/approved-tools.tar.gz"))
            .expect("opens");
    let mut opa_tools = OpaWasm::new("rego-wasm/approved-tools.tar.gz", "aps/tool_call/decision");
    let regorus_tools = Regorus::new(APPROVED_TOOLS_REGO, "data.aps.tool_call.decision");
    let ssn =
        RegoInputPolicy::new("no-ssn", fixture("rego-wasm/no-ssn-input.tar.gz")).expect("opens");
    let mut opa_ssn = OpaWasm::new("rego-wasm/no-ssn-input.tar.gz", "aps/input/decision");
    let regorus_ssn = Regorus::new(NO_SSN_REGO, "data.aps.input.decision");

    // The three sides decide alike, allowing and denying.
    for call in [tool_call("web_search"), tool_call("exec_shell")] {
        let ours = ready(tools.evaluate(&call)).expect("evaluates");
        assert_eq!(
            opa_tools.decide(&call),
            ours,
            "opa-wasm on {}",
            call.tool_name
        );
        assert_eq!(
            regorus_tools.decide(&call),
            ours,
            "regorus on {}",
            call.tool_name
        );
    }
    assert_eq!(
        ready(tools.evaluate(&tool_call("web_search"))).expect("evaluates"),
        PolicyDecision::allow()
    );
    for input in [
        messages("Please summarize the attached quarterly report for me."),
        messages("my SSN is 123-45-6789"),
    ] {
        let ours = ready(ssn.evaluate(&input)).expect("evaluates");
        assert_eq!(opa_ssn.decide(&input), ours, "opa-wasm");
        assert_eq!(regorus_ssn.decide(&input), ours, "regorus");
    }

    let call = tool_call("web_search");
    let input = messages("Please summarize the attached quarterly report for me.");
    assert_eq!(
        ready(ssn.evaluate(&input)).expect("evaluates"),
        PolicyDecision::allow()
    );

    let prepared = Regorus::input(&call);
    compare(
        "approved-tools (allow)",
        rounds,
        vec![
            Side::new("portcullis", || {
                black_box(ready(tools.evaluate(black_box(&call))).ok());
            }),
            Side::new("opa-wasm", || {
                black_box(opa_tools.decide(black_box(&call)));
            }),
            Side::new("regorus", || {
                black_box(regorus_tools.decide(black_box(&call)));
            }),
            Side::new("regorus, input prepared", || {
                black_box(regorus_tools.decide_value(black_box(prepared.clone())));
            }),
        ],
    );
    compare(
        "no-ssn-input (allow, a regular expression)",
        rounds,
        vec![
            Side::new("portcullis", || {
                black_box(ready(ssn.evaluate(black_box(&input))).ok());
            }),
            Side::new("opa-wasm", || {
                black_box(opa_ssn.decide(black_box(&input)));
            }),
            Side::new("regorus", || {
                black_box(regorus_ssn.decide(black_box(&input)));
            }),
        ],
    );
}
