//! Escalations in the server form: asking the person at the client through MCP elicitation.

use std::time::Duration;

use portcullis_engine::ApprovalRequest;
use rmcp::model::{
    CallToolResult, ElicitRequestParams, ElicitationAction, ElicitationSchema, Implementation,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;

use crate::guard::{ToolGuard, not_approved};

/// The property of the elicitation form a person sets to approve the call.
pub(crate) const APPROVE_FIELD: &str = "approve";

/// How long a grant given through elicitation waits for the call it was given for (the guard
/// retries at once).
const GRANT_TTL: Duration = Duration::from_secs(60);

/// What the person at the client answered.
pub(crate) enum Asked {
    /// Approved: a grant for the action is recorded.
    Approved,
    /// Not approved: answer with this result.
    Refused(CallToolResult),
    /// Nobody could be asked (the client does not support elicitation, or the request
    /// failed).
    Unasked,
}

/// Whether the client declared form elicitation (or elicitation without modes, which means
/// forms).
pub(crate) fn supports_elicitation(client: &Peer<RoleServer>) -> bool {
    client.peer_info().is_some_and(|info| {
        info.capabilities
            .elicitation
            .as_ref()
            .is_some_and(|elicitation| elicitation.form.is_some() || elicitation.url.is_none())
    })
}

/// Asks the person at the client to approve the call `request` describes, within the
/// engine's approval time-out; on approval, records a single-use grant for its action.
pub(crate) async fn ask(
    guard: &ToolGuard,
    client: &Peer<RoleServer>,
    tool_name: &str,
    request: &ApprovalRequest,
) -> Asked {
    if !supports_elicitation(client) {
        return Asked::Unasked;
    }
    let Ok(schema) = ElicitationSchema::builder()
        .required_bool_property(APPROVE_FIELD, |field| {
            field
                .title("Approve")
                .description("Let this tool call run once, exactly as shown")
        })
        .build()
    else {
        return Asked::Unasked;
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(tool_name, request),
        requested_schema: schema,
    };
    let timeout = guard.engine().approvals().timeout();
    let answer = match client
        .create_elicitation_with_timeout(params, Some(timeout))
        .await
    {
        Ok(answer) => answer,
        Err(_) => return Asked::Unasked,
    };
    match answer.action {
        ElicitationAction::Accept => {
            let approved = answer
                .content
                .as_ref()
                .and_then(|content| content.get(APPROVE_FIELD))
                .and_then(Value::as_bool)
                == Some(true);
            if !approved {
                return Asked::Refused(not_approved(
                    tool_name,
                    request,
                    "the person did not tick approve",
                ));
            }
            let info = client.peer_info();
            let by = approver(info.as_deref().map(|info| &info.client_info));
            match guard
                .engine()
                .approvals()
                .grant(&request.action_digest, by, GRANT_TTL)
                .await
            {
                Ok(()) => Asked::Approved,
                Err(_) => Asked::Unasked,
            }
        }
        ElicitationAction::Decline => {
            Asked::Refused(not_approved(tool_name, request, "the person declined"))
        }
        ElicitationAction::Cancel => Asked::Refused(not_approved(
            tool_name,
            request,
            "the person cancelled the approval",
        )),
        // An answer this guard does not know: not an approval.
        _ => Asked::Refused(not_approved(
            tool_name,
            request,
            "the client answered neither accept nor decline",
        )),
    }
}

/// Who approved, for the audit trail: the person at this MCP client.
fn approver(client: Option<&Implementation>) -> String {
    match client {
        Some(client) => format!("mcp elicitation ({} {})", client.name, client.version),
        None => "mcp elicitation".to_owned(),
    }
}

/// What the person reads: the tool, the arguments, and why a policy asks.
fn message(tool_name: &str, request: &ApprovalRequest) -> String {
    let arguments = request
        .context
        .get("arguments")
        .map(Value::to_string)
        .unwrap_or_else(|| "{}".to_owned());
    let mut message = format!(
        "Approve the call to tool \"{tool_name}\" with arguments {arguments}? Policy {} asks for a person's approval",
        request
            .policy_ids
            .iter()
            .map(|id| format!("\"{id}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if request.reasons.is_empty() {
        message.push('.');
    } else {
        message.push_str(": ");
        message.push_str(&request.reasons.join("; "));
    }
    message
}
