//! Streaming output: release only text the output policies have cleared.
//!
//! Models stream their answers. [`PolicyEngine::output_stream`] returns an [`OutputStream`]
//! guard: push each delta as it arrives, and release only what the guard yields as
//! [`StreamItem::Text`]. The guard never yields text its output policies have not cleared,
//! and holds back only as much as the policies need.
//!
//! # Modes
//!
//! The mode is chosen once, when the policy set is built (see [`StreamPlan`]):
//!
//! - **Incremental**, when every enforced output policy has a streaming form
//!   ([`Policy::streaming`](crate::Policy::streaming)): DSL `contains` rules and regex redactions
//!   of `response.content`. Each rule looks at the text once, as it arrives, with its state kept
//!   between pushes: a SIMD search for literals one of which every match contains (the `@` of an
//!   e-mail pattern, prefixes of each alternative of `foo|bar`) or, when the pattern has none, a
//!   lazy DFA stepped byte by byte (a list of words skips the text in which a test of four bytes
//!   every few finds none of its words' beginnings); the regex itself runs only where a match may
//!   be. A rule holds back at most its *window*: the longest possible match plus one character of
//!   look-ahead when the pattern has a boundary assertion (`\b`, `$`). Rules run as a pipeline in
//!   declared order, so a rule sees the text as the rules before it changed it, exactly as in
//!   [`PolicyEngine::evaluate_output`]. Text in which no rule's literal occurs, and in which no
//!   rule's DFA has seen a match, skips the pipeline (no rule can match in it, nor change it): the
//!   first three bytes of the literals are tested 16 positions at a time (short deltas a push
//!   behind, a window for several of them), each DFA steps over the new bytes as it would in the
//!   pipeline (a push behind too), and the text is released from where it was received. A literal's
//!   prefix is chosen among the pattern's parts for the bytes prose holds least (the digits of
//!   `[0-9]{4} [0-9]{4}`, not its spaces). A literal of a replacing rule only bounds the lane: no
//!   match can start more than the rules' reach before it, so the lane goes on releasing the text
//!   before that, and the pipeline runs once the text after the literal is long enough to act on
//!   its match (a denying rule's literal makes it run at once); the pipeline then takes only the
//!   text from where a match can start, the lane releasing what comes before. The replacing rules
//!   watched for one-byte literals (the `-` of an SSN, the `@` of an address) are searched for
//!   together, with one `memchr2` or `memchr3`. A rule the lane has just searched the answer for
//!   without finding one of its literals does not search the text of the run the lane hands over
//!   again, unless a replacement of a rule before it could hold or make one of them (each
//!   replacement is checked against its literals when the plan is built). After the run the fast
//!   lane goes on at once if the rules are quiet (the match and its replacement passed on, and for
//!   a later rule that looks around, the character before the text it holds); until they are, a
//!   push only adds to the held text until that fills the windows (or a batch), and the rules run
//!   again. Out of the lane, a push that may bring a denying rule's literal, or in which its DFA
//!   sees a match, goes to the rules at once, and so does every push while a denying rule holds a
//!   literal of its own. A pattern with no upper bound on its match length (`\d+`) cannot stream
//!   unless the rule states a maximum; nor can a pattern that matches the empty string. Guarantees:
//!   the released text is always a prefix of what the whole-text evaluation forwards, and at the
//!   end it equals it; a denial is reported before any byte of the offending match (or after it) is
//!   released.
//! - **Buffer** (the default when any enforced output policy is whole-text only: code
//!   policies without a streaming form, Rego, remote): nothing is released until the whole
//!   answer has been evaluated at [`finish`](OutputStream::finish).
//! - **Checkpoint** (opt-in with [`PolicySetBuilder::stream_checkpoint`]): the accumulated text
//!   is evaluated every N characters, and released up to that point when the evaluation
//!   allows it unchanged; the final evaluation runs before the tail is released. A later
//!   evaluation can deny after earlier text was released: checkpoint mode trades that
//!   guarantee for latency. Errors and time-outs fail closed: held text is never released.
//!
//! A push yields [`StreamItems`]: at most one [`StreamItem`], kept in place, whose text (a
//! [`StreamText`]) is kept in place too unless it is long, so that a push does not allocate
//! for the few bytes it usually releases. [`OutputStream::feed`] is
//! [`push`](OutputStream::push) lending the released text rather than copying it. With [`PolicySetBuilder::stream_batch`] the incremental rules run once
//! per batch of bytes instead of on every push, for answers that come in many tiny deltas.
//!
//! Policies in monitor mode never hold text back: they are evaluated once, on the whole text,
//! when the stream finishes.
//!
//! After a denial or an error nothing more is released.
//!
//! [`PolicySetBuilder::stream_checkpoint`]: crate::PolicySetBuilder::stream_checkpoint
//! [`PolicySetBuilder::stream_batch`]: crate::PolicySetBuilder::stream_batch
//! [`PolicyEngine::output_stream`]: crate::PolicyEngine::output_stream
//! [`PolicyEngine::evaluate_output`]: crate::PolicyEngine::evaluate_output

mod grams;
mod guard;
mod item;
pub(crate) mod plan;
pub(crate) mod report;
pub(crate) mod rule;
mod short;
mod stage;

pub use guard::{Feed, OutputStream};
pub use item::{StreamItem, StreamItems, StreamText};
pub use plan::StreamPlan;
pub use report::{STREAM_POLICY_ID, StreamEvent, StreamMode, StreamOutcome, StreamReport};
pub use rule::{StreamingRule, decide_whole_text};
