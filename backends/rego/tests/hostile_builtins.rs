//! Host builtins called with hostile operands, through a hand-written OPA-ABI module: each call
//! ends in OPA's answer or a clear evaluation error (the memory limit, the time limit, the
//! builtin's own error), never an abort, and the host allocates about what the memory limit
//! allows, not what the operands ask for. This binary counts every allocation of the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use portcullis_rego::{RegoBundle, RegoEvaluationError};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// The tests of this binary run one at a time, so that each one's allocations are its own.
static SERIAL: Mutex<()> = Mutex::new(());

const MEMORY_LIMIT: usize = 16 << 20;

/// Calls `name` on `args` under a 16 MiB memory limit and `time_limit`, on another thread
/// (failing the test instead of hanging when nothing stops the call); the result and the bytes
/// the process allocated meanwhile.
fn call(
    name: &str,
    args: &[Value],
    entrypoint: &'static str,
    time_limit: Duration,
) -> (Result<Option<Value>, RegoEvaluationError>, usize) {
    call_with_input(name, args, &Value::Null, entrypoint, time_limit)
}

/// [`call`], with `input` as the evaluation's input (an operand [`common::INPUT`] stands for).
fn call_with_input(
    name: &str,
    args: &[Value],
    input: &Value,
    entrypoint: &'static str,
    time_limit: Duration,
) -> (Result<Option<Value>, RegoEvaluationError>, usize) {
    let input = input.clone();
    let args: Vec<String> = args
        .iter()
        .map(|arg| match arg.as_str() {
            Some(common::INPUT) => common::INPUT.to_owned(),
            _ => arg.to_string(),
        })
        .collect();
    let bundle = RegoBundle::from_bytes(&common::call_module(name, &args))
        .expect("the call module opens")
        .with_memory_limit(MEMORY_LIMIT)
        .expect("memory limit")
        .with_time_limit(time_limit)
        .expect("time limit");
    let region = Region::new(GLOBAL);
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(bundle.evaluate_blocking(entrypoint, &input));
    });
    let result = receive
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{name} ran on past a minute"));
    (result, region.change().bytes_allocated)
}

fn assert_memory_limit(name: &str, args: &[Value]) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    // A time limit far beyond the memory limit's reach, so that a slow (loaded, unoptimised)
    // run still ends at the memory limit, the behaviour under test.
    let (result, allocated) = call(name, args, "test/call", Duration::from_secs(50));
    assert!(
        matches!(&result, Err(RegoEvaluationError::MemoryLimit { limit, detail })
            if *limit == MEMORY_LIMIT && detail.contains(name)),
        "{name}: {result:?}"
    );
    // The operands themselves are copied a few times on their way out of the guest; the
    // builtin's work stays within the limit.
    let operands: usize = args.iter().map(|arg| arg.to_string().len()).sum();
    assert!(
        allocated < 4 * MEMORY_LIMIT + 8 * operands,
        "{name} allocated {allocated} bytes"
    );
}

#[test]
fn huge_outputs_stop_at_the_memory_limit() {
    let wide = "%1000000s".repeat(40);
    assert_memory_limit("sprintf", &[json!(wide), json!(vec!["x"; 40])]);
    let precise = "%.1000000f".repeat(40);
    assert_memory_limit("sprintf", &[json!(precise), json!(vec![1.5; 40])]);
    assert_memory_limit(
        "regex.replace",
        &[
            json!("a".repeat(100_000)),
            json!("a"),
            json!("$0".repeat(1000)),
        ],
    );
    let run = "a".repeat(2 << 20);
    assert_memory_limit("indexof_n", &[json!(run), json!("a")]);
    assert_memory_limit("regex.find_n", &[json!("a"), json!(run), json!(-1)]);
    assert_memory_limit(
        "regex.find_all_string_submatch_n",
        &[json!("(a)(a)?"), json!(run), json!(-1)],
    );
    assert_memory_limit("regex.split", &[json!("a"), json!(run)]);
    assert_memory_limit("urlquery.encode", &[json!("é".repeat(3 << 20))]);
    assert_memory_limit(
        "strings.render_template",
        &[
            json!("{{range 100000000}}xxxxxxxxxxxxxxxx{{end}}"),
            json!({}),
        ],
    );
    assert_memory_limit(
        "strings.render_template",
        &[
            json!("{{range .items}}{{range $.items}}{{.}}{{end}}{{end}}"),
            json!({"items": vec!["abcdefgh"; 4096]}),
        ],
    );
}

#[test]
fn widths_past_any_memory_end_the_verb_as_go_does() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for format in [
        "%9999999999s",
        "%99999999999999999999999d",
        "%.99999999999999999999f",
    ] {
        let started = Instant::now();
        let (result, allocated) = call(
            "sprintf",
            &[json!(format), json!(["x"])],
            "test/call",
            Duration::from_millis(100),
        );
        assert_eq!(
            result,
            Ok(Some(json!("%!(NOVERB)%!(EXTRA string=x)"))),
            "{format}"
        );
        assert!(allocated < MEMORY_LIMIT, "{format}: {allocated} bytes");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{format} took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn huge_date_arithmetic_is_an_error() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for args in [
        [json!(0), json!(i64::MAX), json!(0), json!(0)],
        [json!(0), json!(0), json!(i64::MAX), json!(0)],
        [json!(0), json!(0), json!(0), json!(i64::MAX)],
        [
            json!(i64::MIN),
            json!(i64::MIN),
            json!(i64::MIN),
            json!(i64::MIN),
        ],
    ] {
        let (result, _) = call("time.add_date", &args, "test/call", Duration::from_secs(10));
        assert!(
            matches!(&result, Err(RegoEvaluationError::Builtin { name, .. }) if name == "time.add_date"),
            "{args:?}: {result:?}"
        );
    }
}

#[test]
fn a_long_builtin_stops_at_the_time_limit() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    // One call over a long run of matches, and a loop of calls that each finish quickly.
    let limit = Duration::from_millis(5);
    // A match every hundred characters: counting each match's characters from the start of
    // the text would take minutes.
    let run = json!(format!("{}b", "a".repeat(99)).repeat(80_000));
    let started = Instant::now();
    let (result, _) = call_with_input(
        "indexof_n",
        &[json!(common::INPUT), json!("b")],
        &run,
        "test/call",
        limit,
    );
    assert_eq!(result, Err(RegoEvaluationError::TimeLimit(limit)));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped after {:?}",
        started.elapsed()
    );
    let (result, _) = call("time.parse_duration_ns", &[json!("1h")], "test/loop", limit);
    assert_eq!(result, Err(RegoEvaluationError::TimeLimit(limit)));
    // Globs whose intersection takes exponential time to rule out: each `.*a` may take any of
    // the `a`s, and none of the ways ends in a `b`.
    let started = Instant::now();
    let (result, _) = call(
        "regex.globs_match",
        &[
            json!(".*a".repeat(20) + ".*b.*"),
            json!("a".repeat(60) + "c"),
        ],
        "test/call",
        limit,
    );
    assert_eq!(result, Err(RegoEvaluationError::TimeLimit(limit)));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopped after {:?}",
        started.elapsed()
    );
    // A template that loops a billion times.
    let (result, _) = call(
        "strings.render_template",
        &[json!("{{range 1000000000}}{{end}}"), json!({})],
        "test/call",
        limit,
    );
    assert_eq!(result, Err(RegoEvaluationError::TimeLimit(limit)));
}

#[test]
fn hostile_globs_and_templates_are_errors() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for args in [
        // Repetitions nested past what the walk recurses into.
        [json!("a*b*".repeat(5_000)), json!("ab".repeat(5_000) + "c")],
        [json!("[z-a]"), json!("a")],
        [json!("a\\"), json!("a")],
    ] {
        let (result, _) = call(
            "regex.globs_match",
            &args,
            "test/call",
            Duration::from_secs(10),
        );
        assert!(
            matches!(&result, Err(RegoEvaluationError::Builtin { name, .. }) if name == "regex.globs_match"),
            "{args:?}: {result:?}"
        );
    }
    for template in [
        // A template that calls itself without end.
        "{{define \"r\"}}{{template \"r\" .}}{{end}}{{template \"r\" .}}".to_owned(),
        // Parentheses nested ten thousand deep.
        format!("{{{{{}1{}}}}}", "(".repeat(10_000), ")".repeat(10_000)),
        // A function on an operand it cannot take (a missing key is no error: OPA renders it).
        "{{len 3}}".to_owned(),
    ] {
        let (result, _) = call(
            "strings.render_template",
            &[json!(template), json!({})],
            "test/call",
            Duration::from_secs(10),
        );
        assert!(
            matches!(&result, Err(RegoEvaluationError::Builtin { name, .. }) if name == "strings.render_template"),
            "{template}: {result:?}"
        );
    }
}

#[test]
fn reasonable_calls_answer() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    // A builtin without a value for its operands leaves the expression undefined, as in OPA.
    let (result, _) = call(
        "uuid.parse",
        &[json!("nope")],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(result, Ok(None));
    let (result, _) = call(
        "uuid.parse",
        &[json!("00000000-0000-4000-8000-000000000000")],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(
        result,
        Ok(Some(json!({"variant": "RFC4122", "version": 4})))
    );
    let (result, _) = call(
        "uuid.parse",
        &[json!("b01d0062-a116-11ee-822b-7ab0b9e5e0c0")],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(
        result,
        Ok(Some(json!({
            "version": 1,
            "variant": "RFC4122",
            "time": 1_703_282_931_110_717_000_i64,
            "clocksequence": 555,
            "nodeid": "7a-b0-b9-e5-e0-c0",
            "macvariables": "local:unicast",
        })))
    );
    let (result, _) = call(
        "regex.globs_match",
        &[json!("a.a."), json!(".b.b")],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(result, Ok(Some(json!(true))));
    let (result, _) = call(
        "regex.globs_match",
        &[json!("[a-z]+"), json!("[0-9]*")],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(result, Ok(Some(json!(false))));
    let (result, _) = call(
        "strings.render_template",
        &[
            json!("{{range $i, $name := .hellonames}}{{if $i}},{{end}}hello {{$name}}{{end}}"),
            json!({"hellonames": ["rohan", "john doe"]}),
        ],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(result, Ok(Some(json!("hello rohan,hello john doe"))));
    let (result, _) = call(
        "sprintf",
        &[json!("%s=%d"), json!(["x", 5])],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(result, Ok(Some(json!("x=5"))));
    let (result, _) = call(
        "indexof_n",
        &[json!("a".repeat(1 << 16)), json!("a".repeat(1 << 15))],
        "test/call",
        Duration::from_secs(10),
    );
    assert_eq!(
        result.map(|value| value.and_then(|v| v.as_array().map(Vec::len))),
        Ok(Some((1 << 15) + 1))
    );
}
