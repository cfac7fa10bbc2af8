//! Builtins the OPA WebAssembly compiler leaves to the host.
//!
//! OPA compiles most builtins into the module itself; the rest appear in the module's `builtins()`
//! map and are called through `opa_builtin0..4`. This host provides the ones an agent policy
//! plausibly uses; a module that needs another one fails when it is opened, naming it.
//! The list is [`HOST_BUILTINS`].
//!
//! One module per family: `sprintf`, `time`, `strings` (strings, globs and regular
//! expressions, with `globs` deciding whether two globs intersect and `template` running Go
//! templates), `encoding` (hex, URL queries, JSON syntax, patches and schemas), `yaml` (YAML
//! 1.1 read and written as OPA does), `crypto` (hashes and HMACs), `net`
//! (CIDRs), `numbers` (ranges and units), `identifiers` (SemVer and UUIDs), `jwt` (decoding, HMAC, RSA and P-256 verification).
//!
//! # Bounds
//! A builtin runs on the host, outside the guest's memory and its clock checks, so it bounds
//! itself: every call gets a [`BuiltinContext`] carrying the evaluation's memory limit and
//! deadline. A builtin [charges](BuiltinContext::charge) what it is about to allocate (the
//! output it builds, the values it collects) against the memory limit, and a builtin that loops
//! over its input [checks the deadline](BuiltinContext::check_time) as it goes; passing either
//! ends the evaluation with the time or memory limit error, as if the guest had passed it.

mod crypto;
mod encoding;
mod globs;
mod identifiers;
pub(crate) mod jwt;
mod net;
mod numbers;
mod sprintf;
mod strings;
mod template;
mod time;
mod yaml;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Why a builtin call did not produce a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BuiltinError {
    /// The builtin failed: bad operands, say. The evaluation fails with this message.
    Failed(String),
    /// The evaluation's deadline passed during the call.
    TimeLimit,
    /// The call would allocate more than the evaluation's memory limit; says what for.
    MemoryLimit(String),
    /// The builtin has no value for these operands: the expression calling it is undefined,
    /// as in OPA (not an error).
    Undefined,
}

impl From<String> for BuiltinError {
    fn from(message: String) -> Self {
        BuiltinError::Failed(message)
    }
}

impl From<&str> for BuiltinError {
    fn from(message: &str) -> Self {
        BuiltinError::Failed(message.to_owned())
    }
}

/// What a builtin returns.
pub(crate) type Outcome = Result<Value, BuiltinError>;

/// Per-evaluation state shared by the builtins of one evaluation, and the bounds of one call.
#[derive(Debug)]
pub(crate) struct BuiltinContext {
    now_ns: Option<i64>,
    /// The evaluation's memory limit in bytes.
    memory_limit: usize,
    /// What the current call has charged so far.
    charged: usize,
    /// Whether the evaluation's deadline has passed.
    past_deadline: fn(u64) -> bool,
    deadline_tick: u64,
    /// Calls to [`check_time`](Self::check_time) since the clock was last read.
    steps: u32,
}

impl Default for BuiltinContext {
    fn default() -> Self {
        Self::new(usize::MAX, u64::MAX, |_| false)
    }
}

/// How many [`BuiltinContext::check_time`] calls read the clock once.
const STEPS_PER_CLOCK_READ: u32 = 256;

impl BuiltinContext {
    /// A context for an evaluation under `memory_limit` bytes whose deadline is the tick
    /// `deadline_tick`, as `past_deadline(deadline_tick)` tells.
    pub(crate) fn new(
        memory_limit: usize,
        deadline_tick: u64,
        past_deadline: fn(u64) -> bool,
    ) -> Self {
        Self {
            now_ns: None,
            memory_limit,
            charged: 0,
            past_deadline,
            deadline_tick,
            steps: 0,
        }
    }

    /// Starts a new evaluation: a new "now", a new deadline.
    pub(crate) fn reset(&mut self, memory_limit: usize, deadline_tick: u64) {
        self.now_ns = None;
        self.memory_limit = memory_limit;
        self.deadline_tick = deadline_tick;
    }

    /// Starts a new call: nothing charged yet.
    pub(crate) fn begin_call(&mut self) {
        self.charged = 0;
        self.steps = 0;
    }

    /// Counts `bytes` about to be allocated by the current call against the memory limit.
    pub(crate) fn charge(&mut self, bytes: usize, what: &str) -> Result<(), BuiltinError> {
        self.charged = self.charged.saturating_add(bytes);
        if self.charged > self.memory_limit {
            return Err(BuiltinError::MemoryLimit(format!(
                "{what} needs more than the memory limit on the host"
            )));
        }
        Ok(())
    }

    /// Fails once the evaluation's deadline has passed. Cheap: reads the clock once every few
    /// hundred calls, so a loop may call it at every step.
    pub(crate) fn check_time(&mut self) -> Result<(), BuiltinError> {
        self.steps += 1;
        if self.steps < STEPS_PER_CLOCK_READ {
            return Ok(());
        }
        self.steps = 0;
        self.check_time_now()
    }

    /// Fails if the evaluation's deadline has passed, reading the clock now.
    pub(crate) fn check_time_now(&self) -> Result<(), BuiltinError> {
        if (self.past_deadline)(self.deadline_tick) {
            return Err(BuiltinError::TimeLimit);
        }
        Ok(())
    }

    /// The evaluation's "now": the same value for every call during one evaluation, as in OPA.
    fn now_ns(&mut self) -> i64 {
        *self.now_ns.get_or_insert_with(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| {
                    i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX)
                })
        })
    }
}

type BuiltinFn = fn(&[Value], &mut BuiltinContext) -> Outcome;

/// A builtin implemented by the host.
pub(crate) struct HostBuiltin {
    pub(crate) name: &'static str,
    pub(crate) func: BuiltinFn,
}

/// The builtins this host provides to OPA WebAssembly modules, by their Rego names.
pub const HOST_BUILTINS: &[&str] = &[
    "sprintf",
    "time.now_ns",
    "time.parse_rfc3339_ns",
    "time.parse_duration_ns",
    "time.date",
    "time.clock",
    "time.weekday",
    "time.add_date",
    "time.format",
    "regex.match",
    "regex.is_valid",
    "regex.replace",
    "regex.split",
    "regex.find_n",
    "regex.find_all_string_submatch_n",
    "strings.reverse",
    "strings.any_prefix_match",
    "strings.any_suffix_match",
    "indexof_n",
    "json.is_valid",
    "hex.encode",
    "hex.decode",
    "base64url.encode_no_pad",
    "urlquery.encode",
    "urlquery.decode",
    "urlquery.encode_object",
    "opa.runtime",
    "trace",
    "time.diff",
    "strings.count",
    "glob.quote_meta",
    "urlquery.decode_object",
    "crypto.sha256",
    "crypto.sha1",
    "crypto.md5",
    "crypto.hmac.sha256",
    "crypto.hmac.sha512",
    "crypto.hmac.sha1",
    "crypto.hmac.md5",
    "crypto.hmac.equal",
    "net.cidr_is_valid",
    "net.cidr_expand",
    "net.cidr_merge",
    "numbers.range_step",
    "units.parse",
    "units.parse_bytes",
    "semver.is_valid",
    "semver.compare",
    "uuid.parse",
    "regex.template_match",
    "regex.globs_match",
    "strings.render_template",
    "time.parse_ns",
    "json.patch",
    "json.verify_schema",
    "json.match_schema",
    "yaml.is_valid",
    "yaml.unmarshal",
    "yaml.marshal",
    "io.jwt.decode",
    "io.jwt.verify_hs256",
    "io.jwt.verify_hs384",
    "io.jwt.verify_hs512",
    "io.jwt.verify_rs256",
    "io.jwt.verify_es256",
];

/// The tables of the families.
const TABLES: &[&[HostBuiltin]] = &[
    sprintf::TABLE,
    time::TABLE,
    strings::TABLE,
    encoding::TABLE,
    crypto::TABLE,
    net::TABLE,
    numbers::TABLE,
    identifiers::TABLE,
    jwt::TABLE,
    &[
        HostBuiltin {
            name: "opa.runtime",
            func: |_, _| Ok(Value::Object(serde_json::Map::new())),
        },
        HostBuiltin {
            name: "trace",
            func: |_, _| Ok(Value::Bool(true)),
        },
    ],
];

/// The host builtin named `name`, if this host provides it.
pub(crate) fn lookup(name: &str) -> Option<&'static HostBuiltin> {
    TABLES
        .iter()
        .flat_map(|table| table.iter())
        .find(|builtin| builtin.name == name)
}

fn arg(args: &[Value], index: usize) -> Result<&Value, BuiltinError> {
    args.get(index)
        .ok_or_else(|| BuiltinError::Failed(format!("missing operand {}", index + 1)))
}

fn string(args: &[Value], index: usize) -> Result<&str, BuiltinError> {
    let value = arg(args, index)?;
    value.as_str().ok_or_else(|| {
        BuiltinError::Failed(format!(
            "operand {} must be a string, got {}",
            index + 1,
            type_name(value)
        ))
    })
}

fn integer(args: &[Value], index: usize) -> Result<i64, BuiltinError> {
    let value = arg(args, index)?;
    value
        .as_i64()
        .or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                .map(|f| f as i64)
        })
        .ok_or_else(|| {
            BuiltinError::Failed(format!(
                "operand {} must be an integer, got {}",
                index + 1,
                type_name(value)
            ))
        })
}

/// `bytes` as lowercase hexadecimal, two digits a byte, as OPA writes hashes and signatures.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// What one JSON value of a result costs on the host, besides its text.
const VALUE_COST: usize = size_of::<Value>();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_builtin_is_implemented() {
        for name in HOST_BUILTINS {
            assert!(lookup(name).is_some(), "{name}");
        }
        let implemented: usize = TABLES.iter().map(|table| table.len()).sum();
        assert_eq!(HOST_BUILTINS.len(), implemented);
    }

    /// Any JSON value, with strings drawn to reach the builtins' parsers (formats, dates,
    /// durations, patterns, CIDRs, versions) as well as at random.
    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let interesting = prop::sample::select(vec![
            "%9999999999s",
            "%*d",
            "%[2]d",
            "%.1000000f",
            "%-08.3e",
            "%x",
            "%q",
            "%v%v%v",
            "2024-02-29T13:45:30.5Z",
            "2006-01-02T15:04:05Z07:00",
            "Mon Jan _2 15:04:05 MST 2006",
            "1h30m",
            "-1.5s",
            "9223372036854775807ns",
            ".5us",
            "a{1000}",
            "(a*)*",
            "\\Q.*\\E",
            "[[:alpha:]]",
            "10.0.0.0/8",
            "::/0",
            "1.2.3-rc.1",
            "1Ki",
            "1e400",
            "[[[[",
            "Europe/Paris",
            "%FF%zz",
            "ff",
            "eyJhbGciOiJIUzI1NiJ9.e30.e30",
            "{.*}",
            "{{.a}}",
            "{{range $i, $v := .}}{{$i}}={{$v}}{{end}}",
            "{{if eq .a 1}}{{printf \"%d\" .a}}{{else}}{{len .}}{{end}}",
            "{{template \"x\" (index . \"a\")}}",
            "[a-z]+.*",
            "[\\]-]*a+",
        ])
        .prop_map(Value::from);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            "[ -~é%0-9.:/]{0,12}".prop_map(Value::from),
            interesting,
        ];
        leaf.prop_recursive(2, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// No operands make a builtin panic or outgrow a 1 MiB limit unnoticed: every call
        /// answers a value, undefined, or an error.
        #[test]
        fn no_operands_make_a_builtin_panic(
            args in proptest::collection::vec(any_value(), 0..5)
        ) {
            for table in TABLES {
                for builtin in *table {
                    let mut context = BuiltinContext::new(1 << 20, u64::MAX, |_| false);
                    context.begin_call();
                    let _ = (builtin.func)(&args, &mut context);
                }
            }
        }

        /// Formats made of verbs, flags, widths and indexes, on any operands.
        #[test]
        fn no_format_makes_sprintf_panic(
            format in "([%-+# 0-9.*\\[\\]vdsqxXeEfFgGtbocUz]|[a-z ]){0,24}",
            operands in proptest::collection::vec(any_value(), 0..4)
        ) {
            let mut context = BuiltinContext::new(1 << 20, u64::MAX, |_| false);
            context.begin_call();
            let result = sprintf::go_format(&format, &operands.iter().map(sprintf::GoValue::of).collect::<Vec<_>>(), &mut context);
            proptest::prop_assert!(result.is_ok() || matches!(result, Err(BuiltinError::MemoryLimit(_))));
        }

        /// Date arithmetic on any numbers: a time or an error.
        #[test]
        fn no_numbers_make_date_arithmetic_panic(
            numbers in proptest::collection::vec(proptest::prelude::any::<i64>(), 4)
        ) {
            let builtin = lookup("time.add_date").expect("time.add_date");
            let args: Vec<Value> = numbers.into_iter().map(Value::from).collect();
            let _ = (builtin.func)(&args, &mut BuiltinContext::default());
        }
    }

    #[test]
    fn charges_add_up_to_the_limit() {
        let mut context = BuiltinContext::new(100, u64::MAX, |_| false);
        context.begin_call();
        assert_eq!(context.charge(60, "a"), Ok(()));
        assert!(matches!(
            context.charge(41, "b"),
            Err(BuiltinError::MemoryLimit(_))
        ));
        context.begin_call();
        assert_eq!(context.charge(100, "c"), Ok(()));
    }

    #[test]
    fn the_deadline_is_read_every_few_steps() {
        let mut context = BuiltinContext::new(usize::MAX, 0, |tick| tick == 0);
        context.begin_call();
        assert_eq!(context.check_time_now(), Err(BuiltinError::TimeLimit));
        let stopped = (0..1000).find(|_| context.check_time().is_err());
        assert_eq!(stopped, Some(STEPS_PER_CLOCK_READ as usize - 1));
    }
}
