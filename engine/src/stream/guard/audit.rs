//! The guard's audit records: each stage's decisions, and the stream's start and end.

use std::borrow::Cow;
use std::time::SystemTime;

use crate::audit::{AuditContext, AuditDecision, AuditRecord};
use crate::context::{InterceptionPoint, Message, OutputContext};
use crate::decision::{PolicyDecision, Redaction};
use crate::stream::plan::{Stage, StageAction};
use crate::stream::report::{STREAM_POLICY_ID, StreamEvent, StreamReport};

use super::OutputStream;

impl<'e> OutputStream<'e> {
    /// One record per incremental policy at the end: `redact` if it replaced anything,
    /// `allow` otherwise.
    pub(super) fn record_stage_decisions(&self) {
        if !self.engine.audits() {
            return;
        }
        let mut index = 0;
        while index < self.plan.stages.len() {
            let policy_index = self.plan.stages[index].policy_index;
            let mut redactions = Vec::new();
            let first = &self.plan.stages[index];
            while index < self.plan.stages.len()
                && self.plan.stages[index].policy_index == policy_index
            {
                let stage = &self.plan.stages[index];
                if let StageAction::Replace { replacement } = &stage.action
                    && self.stages[index].replacements > 0
                {
                    redactions.push(
                        Redaction::replace("response.content", stage.pattern.clone())
                            .with_replacement(replacement.clone()),
                    );
                }
                index += 1;
            }
            let decision = if redactions.is_empty() {
                PolicyDecision::allow()
            } else {
                PolicyDecision::redact(redactions)
            };
            self.record_stage(first, decision);
        }
    }

    pub(super) fn record_stage(&self, stage: &Stage, decision: PolicyDecision) {
        if !self.engine.audits() {
            return;
        }
        let context =
            OutputContext::new(Message::assistant(self.raw.clone()), self.metadata.clone());
        // The whole answer's own records, at its final evaluation, decide whether a refusing
        // audit log fails the stream.
        let _ = self.engine.emit(AuditRecord {
            policy_id: &stage.policy_id,
            decision: AuditDecision::from(&decision),
            interception_point: InterceptionPoint::Output,
            reason: decision.reason().map(Cow::Borrowed),
            context: AuditContext::Output(&context),
            timestamp: SystemTime::now(),
            enforced: true,
            policy_decision: Some(&decision),
            stream: None,
        });
    }

    pub(super) fn report(&mut self, event: StreamEvent) {
        if event == StreamEvent::End {
            if self.reported_end {
                return;
            }
            self.reported_end = true;
        }
        if !self.engine.audits() {
            return;
        }
        self.flush();
        let report = StreamReport {
            event,
            mode: self.plan.mode,
            outcome: if event == StreamEvent::End {
                self.finished
            } else {
                None
            },
            raw_chars: self.raw.chars().count() + self.chars_after_end,
            released_chars: self.released.chars().count(),
            max_held_chars: self.max_held_chars,
            time_to_first_release: self.first_release,
        };
        let reason = match report.outcome {
            Some(outcome) => format!("stream ended: {outcome}"),
            None => "stream started".to_owned(),
        };
        let context = OutputContext::new(Message::assistant(String::new()), self.metadata.clone());
        let decision = PolicyDecision::audit(reason);
        // A report of the stream, not a decision: a refusal is the final evaluation's to act on.
        let _ = self.engine.emit(AuditRecord {
            policy_id: STREAM_POLICY_ID,
            decision: AuditDecision::Audit,
            interception_point: InterceptionPoint::Output,
            reason: decision.reason().map(Cow::Borrowed),
            context: AuditContext::Output(&context),
            timestamp: SystemTime::now(),
            enforced: true,
            policy_decision: Some(&decision),
            stream: Some(&report),
        });
    }
}
