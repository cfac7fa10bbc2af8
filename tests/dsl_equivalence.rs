//! A rule compiled by `dsl_policy!` decides exactly like the same file loaded at run time by
//! `DslInputPolicy::new` (and twins), for every rule file of the repository and many
//! generated contexts. Rules with warnings are compared too (their compiler warnings are
//! allowed here: they are the point).
#![cfg(feature = "macros")]
#![allow(deprecated)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;

use portcullis::dsl::{DslInputPolicy, DslOutputPolicy, DslToolCallPolicy, DslToolResultPolicy};
use portcullis::{
    InputPolicy, InterceptionPoint, OutputPolicy, Policy, PolicyDecision, ToolCallPolicy,
    ToolResultPolicy, dsl_policy,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A compiled and a runtime policy of the same file.
struct Pair<P: ?Sized> {
    file: &'static str,
    compiled: Box<P>,
    runtime: Box<P>,
}

/// Every rule file of the repository that is valid for a point, with that point. The test
/// `every_valid_rule_file_is_compared` fails when a file is missing here.
macro_rules! rule_files {
    ($($point:ident $file:literal),* $(,)?) => {
        fn input_pairs() -> Vec<Pair<dyn InputPolicy>> {
            let mut pairs: Vec<Pair<dyn InputPolicy>> = Vec::new();
            $(rule_files!(@push pairs, input, $point, $file, DslInputPolicy);)*
            pairs
        }
        fn tool_call_pairs() -> Vec<Pair<dyn ToolCallPolicy>> {
            let mut pairs: Vec<Pair<dyn ToolCallPolicy>> = Vec::new();
            $(rule_files!(@push pairs, tool_call, $point, $file, DslToolCallPolicy);)*
            pairs
        }
        fn output_pairs() -> Vec<Pair<dyn OutputPolicy>> {
            let mut pairs: Vec<Pair<dyn OutputPolicy>> = Vec::new();
            $(rule_files!(@push pairs, output, $point, $file, DslOutputPolicy);)*
            pairs
        }
        fn tool_result_pairs() -> Vec<Pair<dyn ToolResultPolicy>> {
            let mut pairs: Vec<Pair<dyn ToolResultPolicy>> = Vec::new();
            $(rule_files!(@push pairs, tool_result, $point, $file, DslToolResultPolicy);)*
            pairs
        }
        const LISTED: &[&str] = &[$($file),*];
    };
    (@push $pairs:ident, input, input, $file:literal, $runtime:ident) => {
        $pairs.push(pair($file, Box::new(dsl_policy!(input, $file)), |id, dir| $runtime::new(id, dir).map(|p| Box::new(p) as Box<_>)));
    };
    (@push $pairs:ident, tool_call, tool_call, $file:literal, $runtime:ident) => {
        $pairs.push(pair($file, Box::new(dsl_policy!(tool_call, $file)), |id, dir| $runtime::new(id, dir).map(|p| Box::new(p) as Box<_>)));
    };
    (@push $pairs:ident, output, output, $file:literal, $runtime:ident) => {
        $pairs.push(pair($file, Box::new(dsl_policy!(output, $file)), |id, dir| $runtime::new(id, dir).map(|p| Box::new(p) as Box<_>)));
    };
    (@push $pairs:ident, tool_result, tool_result, $file:literal, $runtime:ident) => {
        $pairs.push(pair($file, Box::new(dsl_policy!(tool_result, $file)), |id, dir| $runtime::new(id, dir).map(|p| Box::new(p) as Box<_>)));
    };
    (@push $pairs:ident, $wanted:ident, $point:ident, $file:literal, $runtime:ident) => {};
}

rule_files! {
    tool_call "examples/rules/approved_tools.json",
    output "examples/rules/audit_refunds.json",
    input "examples/rules/block_secrets.json",
    input "examples/rules/max_length.json",
    input "examples/rules/no_ssn.json",
    tool_call "examples/rules/tag_tool_calls.json",
    input "tests/ui/rules/always_allow_audited.json",
    tool_call "tests/ui/rules/field_of_another_point.json",
    tool_call "tests/ui/rules/large_refund.json",
    output "tests/ui/rules/leaked_keys.json",
    output "tests/ui/rules/mask_passwords.json",
    output "tests/ui/rules/redact_card_numbers.json",
    input "tests/ui/rules/support_prefix.json",
    input "tests/ui/rules/unusual_roles.json",
    input "tests/ui/rules/upper_case_role.json",
    tool_call "tests/ui/rules/operator_type_mismatch.json",
    output "tests/ui/rules/missing_redactions.json",
    tool_result "tests/ui/rules/label_web_results.json",
}

/// Builds a pair: the compiled policy, and the runtime policy of the same file (id = stem,
/// directory = the file's directory).
fn pair<P: ?Sized>(
    file: &'static str,
    compiled: Box<P>,
    load: impl FnOnce(&str, &Path) -> Result<Box<P>, portcullis::dsl::DslError>,
) -> Pair<P> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let id = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default();
    let dir = path.parent().unwrap_or(Path::new("."));
    let runtime = load(id, dir).unwrap_or_else(|error| panic!("{file} loads at run time: {error}"));
    Pair {
        file,
        compiled,
        runtime,
    }
}

#[test]
fn every_valid_rule_file_is_compared() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed: BTreeSet<&str> = LISTED.iter().copied().collect();
    let mut missing = Vec::new();
    for dir in ["examples/rules", "tests/ui/rules"] {
        let entries = std::fs::read_dir(root.join(dir)).expect("the rules directory");
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let source = std::fs::read_to_string(&path).expect("a readable rule file");
            let name = format!(
                "{dir}/{}",
                path.file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
            );
            let valid_somewhere = [
                InterceptionPoint::Input,
                InterceptionPoint::ToolCall,
                InterceptionPoint::Output,
                InterceptionPoint::ToolResult,
            ]
            .into_iter()
            .any(|point| portcullis::dsl::check_source(&source, &name, point).is_ok());
            if valid_somewhere && !listed.contains(name.as_str()) {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "add these rule files to `rule_files!`: {missing:?}"
    );
    assert_eq!(
        input_pairs().len()
            + tool_call_pairs().len()
            + output_pairs().len()
            + tool_result_pairs().len(),
        LISTED.len()
    );
}

#[test]
fn compiled_and_runtime_policies_have_the_same_id_mode_and_streaming_form() {
    for pair in input_pairs() {
        assert_eq!(pair.compiled.id(), pair.runtime.id(), "{}", pair.file);
        assert_eq!(pair.compiled.mode(), pair.runtime.mode(), "{}", pair.file);
    }
    for pair in tool_call_pairs() {
        assert_eq!(pair.compiled.id(), pair.runtime.id(), "{}", pair.file);
        assert_eq!(pair.compiled.mode(), pair.runtime.mode(), "{}", pair.file);
    }
    for pair in tool_result_pairs() {
        assert_eq!(pair.compiled.id(), pair.runtime.id(), "{}", pair.file);
        assert_eq!(pair.compiled.mode(), pair.runtime.mode(), "{}", pair.file);
    }
    for pair in output_pairs() {
        assert_eq!(pair.compiled.id(), pair.runtime.id(), "{}", pair.file);
        assert_eq!(pair.compiled.mode(), pair.runtime.mode(), "{}", pair.file);
        assert_eq!(
            pair.compiled.streaming(),
            pair.runtime.streaming(),
            "{}: the same streaming form",
            pair.file
        );
    }
    assert!(
        output_pairs()
            .iter()
            .any(|pair| pair.compiled.streaming().is_some()),
        "some compiled output rule has a streaming form"
    );
    let ids: Vec<String> = input_pairs()
        .iter()
        .map(|p| p.compiled.id().to_owned())
        .collect();
    assert!(ids.contains(&"no_ssn".to_owned()));
}

// ---- generated contexts: shared with the differential test of generated rules ----

mod dsl_contexts;

use dsl_contexts::{
    input_context, output_context, runtime, same, tool_call_context, tool_result_context,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn input_rules_decide_alike(context in input_context()) {
        let rt = runtime();
        for pair in input_pairs() {
            let compiled = rt.block_on(pair.compiled.evaluate(&context));
            let runtime = rt.block_on(pair.runtime.evaluate(&context));
            same(pair.file, compiled, runtime)?;
        }
    }

    #[test]
    fn tool_call_rules_decide_alike(context in tool_call_context()) {
        let rt = runtime();
        for pair in tool_call_pairs() {
            let compiled = rt.block_on(pair.compiled.evaluate(&context));
            let runtime = rt.block_on(pair.runtime.evaluate(&context));
            same(pair.file, compiled, runtime)?;
        }
    }

    #[test]
    fn tool_result_rules_decide_alike(context in tool_result_context()) {
        let rt = runtime();
        for pair in tool_result_pairs() {
            let compiled = rt.block_on(pair.compiled.evaluate(&context));
            let runtime = rt.block_on(pair.runtime.evaluate(&context));
            same(pair.file, compiled, runtime)?;
        }
    }

    #[test]
    fn output_rules_decide_alike(context in output_context()) {
        let rt = runtime();
        for pair in output_pairs() {
            let compiled = rt.block_on(pair.compiled.evaluate(&context));
            let runtime = rt.block_on(pair.runtime.evaluate(&context));
            same(pair.file, compiled, runtime)?;
        }
    }
}

/// The generated contexts make every rule both fire and not fire, so the comparison above
/// covers both branches of every rule (rules whose condition is `always` aside).
#[test]
fn generated_contexts_make_every_rule_fire_and_not_fire() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;

    fn tally<C, P: ?Sized>(
        files: &mut BTreeMap<&'static str, (usize, usize)>,
        pairs: &[Pair<P>],
        contexts: &[C],
        decide: impl Fn(&P, &C) -> PolicyDecision,
    ) {
        for pair in pairs {
            for context in contexts {
                let entry = files.entry(pair.file).or_default();
                if decide(&pair.compiled, context) == PolicyDecision::allow() {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
        }
    }

    fn sample<S: Strategy>(strategy: S) -> Vec<S::Value> {
        let mut runner = TestRunner::deterministic();
        (0..400)
            .filter_map(|_| {
                strategy
                    .new_tree(&mut runner)
                    .ok()
                    .map(|tree| tree.current())
            })
            .collect()
    }

    let rt = runtime();
    let mut files = BTreeMap::new();
    let decide = |result: Result<PolicyDecision, portcullis::BoxError>| {
        result.unwrap_or_else(|error| panic!("a DSL rule never fails: {error}"))
    };
    tally(
        &mut files,
        &input_pairs(),
        &sample(input_context()),
        |p, c| decide(rt.block_on(p.evaluate(c))),
    );
    tally(
        &mut files,
        &tool_call_pairs(),
        &sample(tool_call_context()),
        |p, c| decide(rt.block_on(p.evaluate(c))),
    );
    tally(
        &mut files,
        &output_pairs(),
        &sample(output_context()),
        |p, c| decide(rt.block_on(p.evaluate(c))),
    );
    tally(
        &mut files,
        &tool_result_pairs(),
        &sample(tool_result_context()),
        |p, c| decide(rt.block_on(p.evaluate(c))),
    );
    for (file, (allowed, other)) in files {
        // A rule whose condition is `always` has only one branch.
        let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .expect("a readable rule file");
        let rule: Value = serde_json::from_str(&source).expect("a JSON rule");
        // A rule whose condition can never hold (a warning) has only one branch too.
        let warned = [
            InterceptionPoint::Input,
            InterceptionPoint::ToolCall,
            InterceptionPoint::Output,
            InterceptionPoint::ToolResult,
        ]
        .into_iter()
        .filter_map(|point| portcullis::dsl::check_source(&source, file, point).ok())
        .any(|checked| {
            checked
                .warnings()
                .iter()
                .any(|warning| warning.message().contains("never"))
        });
        if warned {
            continue;
        }
        if rule["condition"] == json!({ "always": true }) {
            assert!(
                other > 0 || file.ends_with("always_allow_audited.json"),
                "{file}"
            );
            continue;
        }
        assert!(
            allowed > 0 && other > 0,
            "{file}: {allowed} allowed, {other} other decisions"
        );
    }
}
