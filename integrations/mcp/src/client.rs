//! The client form: a guarded view of an rmcp client connection.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResult, Tool,
};
use rmcp::service::{Peer, RoleClient, RunningService, Service, ServiceError};

use crate::guard::{CallCheck, ToolGuard};

/// How long the guard waits for the upstream server to answer one request by default.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(300);

/// An rmcp client connection whose tool calls and tool lists go through the policies.
///
/// [`call_tool`](Self::call_tool) runs the tool-call policies before the request is sent
/// (a transformation rewrites the arguments; a refusal answers an error result without
/// calling the server) and the result policies on the result (tool-result policies, or
/// output policies for a set without them; see [`ToolGuard::check_result`]);
/// [`list_tools`](Self::list_tools) hides the tools the policies would refuse;
/// [`read_resource`](Self::read_resource) and [`get_prompt`](Self::get_prompt) run the
/// result policies on what they return. Everything else goes through [`peer`](Self::peer),
/// unguarded.
///
/// ```no_run
/// # async fn run(engine: portcullis_engine::PolicyEngine) -> Result<(), Box<dyn std::error::Error>> {
/// use portcullis_mcp::{GuardedClient, ToolGuard};
/// use rmcp::{ServiceExt, model::CallToolRequestParams};
///
/// # let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(tokio::io::empty(), tokio::io::sink());
/// let guarded = GuardedClient::from_running(().serve(transport).await?, ToolGuard::new(engine));
/// let result = guarded.call_tool(CallToolRequestParams::new("read_file")).await?;
/// if let Some(denial) = portcullis_mcp::denial(&result) {
///     eprintln!("refused by {}", denial.policy_id());
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct GuardedClient {
    peer: Peer<RoleClient>,
    guard: ToolGuard,
    timeout: Duration,
    /// The running connection, when the guard owns it: dropping an rmcp `RunningService`
    /// closes its connection.
    connection: Option<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for GuardedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedClient")
            .field("peer", &self.peer)
            .field("guard", &self.guard)
            .field("timeout", &self.timeout)
            .field("owns_connection", &self.connection.is_some())
            .finish()
    }
}

impl GuardedClient {
    /// Guards the connection `peer` (`RunningService::peer().clone()`) with `guard`. The
    /// caller keeps the `RunningService` alive: dropping it closes the connection (see
    /// [`from_running`](Self::from_running)).
    pub fn new(peer: Peer<RoleClient>, guard: ToolGuard) -> Self {
        GuardedClient {
            peer,
            guard,
            timeout: DEFAULT_UPSTREAM_TIMEOUT,
            connection: None,
        }
    }

    /// Guards the running connection `connection` with `guard`, and keeps it open as long as
    /// this client or a clone of it lives.
    pub fn from_running<S: Service<RoleClient>>(
        connection: RunningService<RoleClient, S>,
        guard: ToolGuard,
    ) -> Self {
        let mut client = GuardedClient::new(connection.peer().clone(), guard);
        client.connection = Some(Arc::new(connection));
        client
    }

    /// How long to wait for the server's answer to one request (default
    /// [`DEFAULT_UPSTREAM_TIMEOUT`]); past it the call fails with
    /// `ServiceError::Timeout`.
    pub fn upstream_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The guard's engine and identity.
    pub fn guard(&self) -> &ToolGuard {
        &self.guard
    }

    /// The connection itself, for the requests the guard does not check.
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    pub(crate) async fn upstream<T>(
        &self,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ServiceError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(answer) => answer,
            Err(_) => Err(ServiceError::Timeout {
                timeout: self.timeout,
            }),
        }
    }

    /// Calls a tool through the policies; see [`call_tool_once`](Self::call_tool_once).
    /// An answer that is not a final result (a task, a request for more input) fails with
    /// `ServiceError::UnexpectedResponse`, as rmcp's own `Peer::call_tool` does.
    pub async fn call_tool(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResult, ServiceError> {
        match self.call_tool_once(params).await? {
            CallToolResponse::Complete(result) => Ok(result),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Sends one `tools/call` through the policies.
    ///
    /// - The tool-call policies see the tool name and arguments first. A refusal (a denial,
    ///   or a policy that could not be evaluated) is answered here with an error result
    ///   (`isError: true`, the policy and the reason; [`denial`](crate::denial) reads it):
    ///   the server is never called. A transformation or redaction rewrites the arguments
    ///   that are sent. A call that needs a person's approval is answered the same way, with
    ///   the approval request in the result ([`approval_request`](crate::approval_request)):
    ///   the application records a grant and calls again.
    /// - A final result goes through the result policies ([`ToolGuard::check_result`]):
    ///   redactions reach every text block,
    ///   embedded text resource and string of `structuredContent`, a refusal replaces the
    ///   result.
    /// - A request for more input (`InputRequired`) is passed back as it is: the retried
    ///   call carries the same tool and arguments and is checked again.
    /// - A task is refused with an error: its result would arrive later, past the output
    ///   policies.
    pub async fn call_tool_once(
        &self,
        params: CallToolRequestParams,
    ) -> Result<CallToolResponse, ServiceError> {
        let params = match self.guard.check_call(params).await {
            CallCheck::Proceed(params) => params,
            CallCheck::Refused(result)
            | CallCheck::ApprovalRequired {
                refused: result, ..
            } => {
                return Ok(CallToolResponse::Complete(result));
            }
        };
        let name = params.name.clone();
        let arguments = params.arguments.clone().unwrap_or_default();
        match self.upstream(self.peer.call_tool_once(params)).await? {
            CallToolResponse::Complete(result) => Ok(CallToolResponse::Complete(
                self.guard.check_result(&name, arguments, result).await,
            )),
            CallToolResponse::Task(_) => Err(ServiceError::McpError(ErrorData::internal_error(
                format!(
                    "the server answered the call to tool \"{name}\" with a task; the guard refuses tasks because their results would skip the output policies"
                ),
                None,
            ))),
            other => Ok(other),
        }
    }

    /// One page of the server's tools, without those the policies would refuse.
    pub async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
    ) -> Result<ListToolsResult, ServiceError> {
        let mut result = self.upstream(self.peer.list_tools(params)).await?;
        result.tools = self.guard.filter_tools(result.tools).await;
        Ok(result)
    }

    /// Reads a resource, its text through the result policies
    /// ([`ToolGuard::check_resource`]): a redaction reaches every text content; a refusal is
    /// `ServiceError::McpError` with [`DENIAL_ERROR_CODE`](crate::DENIAL_ERROR_CODE).
    pub async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
    ) -> Result<ReadResourceResult, ServiceError> {
        let result = self
            .upstream(self.peer.read_resource(params.clone()))
            .await?;
        self.guard
            .check_resource(&params, result)
            .await
            .map_err(ServiceError::McpError)
    }

    /// Gets a prompt, its messages' text through the result policies
    /// ([`ToolGuard::check_prompt`]); as [`read_resource`](Self::read_resource) otherwise.
    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
    ) -> Result<GetPromptResult, ServiceError> {
        let result = self.upstream(self.peer.get_prompt(params.clone())).await?;
        self.guard
            .check_prompt(&params, result)
            .await
            .map_err(ServiceError::McpError)
    }

    /// Every tool of the server, without those the policies would refuse.
    pub async fn list_all_tools(&self) -> Result<Vec<Tool>, ServiceError> {
        let tools = self.upstream(self.peer.list_all_tools()).await?;
        Ok(self.guard.filter_tools(tools).await)
    }
}
