//! The server form: an MCP server in front of another, guarding its tools.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientNotification, ClientRequest,
    CompleteRequestParams, CompleteResult, CustomNotification, CustomRequest, CustomResult,
    GetPromptRequestParams, GetPromptResponse, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, ServerResult, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{
    NotificationContext, Peer, RequestContext, RoleClient, RoleServer, RunningService, Service,
    ServiceError,
};
use rmcp::{ErrorData, ServerHandler};

use crate::approval::{self, Asked};
use crate::client::GuardedClient;
use crate::guard::{CallCheck, ToolGuard};
use crate::relay::UpstreamRelay;

/// An MCP server that serves what an upstream MCP server offers, with its tools guarded.
///
/// Serve it like any rmcp server handler: on stdio
/// (`guarded.serve(rmcp::transport::stdio())`), on any async reader and writer, or on
/// streamable HTTP (`rmcp::transport::StreamableHttpService`, one clone per session).
///
/// - `tools/call` goes through the tool-call policies, then upstream, then the output
///   policies ([`GuardedClient::call_tool_once`]); a refusal is a tool result with
///   `isError: true` and the reason, and the upstream is not called. A call a policy
///   escalates is asked of the person at the client through MCP elicitation (a form with
///   one `approve` box) when the client declared that capability: approved, a single-use
///   grant is recorded for that exact action and the call proceeds; declined or cancelled,
///   it is refused as a denial by the escalating policy. A client without elicitation (or
///   one that fails to answer within the engine's approval time-out) gets an error result
///   naming the approval request ([`approval_request`](crate::approval_request)).
///   A call the client cancels is cancelled upstream too.
/// - `tools/list` hides the tools the policies would refuse.
/// - `initialize` answers with the upstream's server info, instructions and capabilities
///   (without the tasks extension, which would let results skip the output policies).
/// - Prompts, resources, completion, logging level, custom requests and the client's
///   notifications (`roots/list_changed`, custom ones) are passed to the upstream as they
///   are.
/// - An upstream that is gone, does not answer in time, or answers something that is not
///   a valid response makes the one request fail with a JSON-RPC internal error that says
///   so; the guard keeps serving.
#[derive(Debug, Clone)]
pub struct GuardedServer {
    client: GuardedClient,
    relay: Option<UpstreamRelay>,
}

impl GuardedServer {
    /// A server in front of the upstream connection `upstream` (an initialized rmcp client:
    /// `RunningService::peer().clone()`), guarded by `guard`. The caller keeps the
    /// `RunningService` alive (see [`from_running`](Self::from_running)).
    pub fn new(upstream: Peer<RoleClient>, guard: ToolGuard) -> Self {
        GuardedServer::from_client(GuardedClient::new(upstream, guard))
    }

    /// A server in front of the running upstream connection `upstream` (an initialized rmcp
    /// client), guarded by `guard`; the connection stays open as long as the server (or a
    /// clone of it: one per HTTP session) lives.
    pub fn from_running<S: Service<RoleClient>>(
        upstream: RunningService<RoleClient, S>,
        guard: ToolGuard,
    ) -> Self {
        GuardedServer::from_client(GuardedClient::from_running(upstream, guard))
    }

    /// A server over a guarded client (to share its settings, such as the upstream
    /// time-out).
    pub fn from_client(client: GuardedClient) -> Self {
        GuardedServer {
            client,
            relay: None,
        }
    }

    /// Relays the upstream's notifications through `relay`, the client handler its
    /// connection was made with, to the client that initializes a session with this server.
    pub fn relay(mut self, relay: UpstreamRelay) -> Self {
        self.relay = Some(relay);
        self
    }

    /// A tower service serving this guard on streamable HTTP, one clone per session
    /// (mount it at the MCP endpoint's path: `/mcp` by convention). Sessions live in memory.
    ///
    /// ```no_run
    /// # fn run(guarded: portcullis_mcp::GuardedServer) {
    /// use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    ///
    /// let service = guarded.streamable_http_service(StreamableHttpServerConfig::default());
    /// // Serve `service` with hyper (hyper_util::service::TowerToHyperService) or mount it
    /// // in an axum router.
    /// # drop(service);
    /// # }
    /// ```
    pub fn streamable_http_service(
        self,
        config: rmcp::transport::streamable_http_server::StreamableHttpServerConfig,
    ) -> rmcp::transport::streamable_http_server::StreamableHttpService<
        GuardedServer,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    > {
        rmcp::transport::streamable_http_server::StreamableHttpService::new(
            move || Ok(self.clone()),
            std::sync::Arc::default(),
            config,
        )
    }

    /// The guarded upstream connection.
    pub fn client(&self) -> &GuardedClient {
        &self.client
    }

    fn upstream(&self) -> &Peer<RoleClient> {
        self.client.peer()
    }

    async fn forward<T>(
        &self,
        method: &str,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ErrorData> {
        self.client
            .upstream(request)
            .await
            .map_err(|error| upstream_error(method, error))
    }

    /// [`forward`](Self::forward), given up when the client cancels its request: the
    /// upstream request is dropped, and rmcp tells the upstream it is cancelled.
    async fn forward_cancellable<T>(
        &self,
        method: &str,
        cancelled: impl Future<Output = ()>,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ErrorData> {
        tokio::select! {
            answer = self.forward(method, request) => answer,
            () = cancelled => Err(ErrorData::internal_error(
                format!("{method}: the client cancelled the request"),
                None,
            )),
        }
    }
}

/// The error a client receives when the upstream could not answer `method`.
fn upstream_error(method: &str, error: ServiceError) -> ErrorData {
    match error {
        // The upstream's own protocol error (an unknown prompt, invalid params): the client
        // reads it as the upstream wrote it.
        ServiceError::McpError(error) => error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            ErrorData::internal_error(
                format!("{method}: the upstream MCP server is not connected ({error})"),
                None,
            )
        }
        ServiceError::UnexpectedResponse => ErrorData::internal_error(
            format!(
                "{method}: the upstream MCP server answered with something that is not a valid response"
            ),
            None,
        ),
        other => ErrorData::internal_error(
            format!("{method}: the upstream MCP server did not answer: {other}"),
            None,
        ),
    }
}

impl ServerHandler for GuardedServer {
    fn get_info(&self) -> ServerConfig {
        let Some(upstream) = self.upstream().peer_info() else {
            return ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        };
        let mut capabilities = upstream.capabilities.clone();
        if let Some(extensions) = &mut capabilities.extensions {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
        }
        let mut info = ServerConfig::new(capabilities)
            .with_protocol_version(upstream.protocol_version.clone());
        if let Some(server_info) = &upstream.server_info {
            info = info.with_server_info(server_info.clone());
        }
        if let Some(instructions) = &upstream.instructions {
            info = info.with_instructions(instructions.clone());
        }
        info.meta.clone_from(&upstream.meta);
        info
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if let Some(relay) = &self.relay {
            relay.attach(context.peer.clone());
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let guard = self.client.guard();
        let params = match guard.check_call(request.clone()).await {
            CallCheck::Proceed(params) => params,
            CallCheck::Refused(result) => return Ok(CallToolResponse::Complete(result)),
            CallCheck::ApprovalRequired {
                request: approval,
                refused,
            } => {
                // Ask the person at the client (MCP elicitation), unless the client cancels
                // the call meanwhile.
                let asked = tokio::select! {
                    asked = approval::ask(guard, &context.peer, &request.name, &approval) => asked,
                    () = context.ct.cancelled() => {
                        return Err(ErrorData::internal_error(
                            "tools/call: the client cancelled the request",
                            None,
                        ));
                    }
                };
                match asked {
                    // The grant is recorded: the same call is checked again, and proceeds
                    // on it (or is refused by what else the policies say).
                    Asked::Approved => match guard.check_call(request).await {
                        CallCheck::Proceed(params) => params,
                        CallCheck::Refused(result)
                        | CallCheck::ApprovalRequired {
                            refused: result, ..
                        } => return Ok(CallToolResponse::Complete(result)),
                    },
                    Asked::Refused(result) => return Ok(CallToolResponse::Complete(result)),
                    Asked::Unasked => return Ok(CallToolResponse::Complete(refused)),
                }
            }
        };
        let name = params.name.clone();
        match self
            .forward_cancellable(
                "tools/call",
                context.ct.cancelled(),
                self.upstream().call_tool_once(params),
            )
            .await?
        {
            CallToolResponse::Complete(result) => Ok(CallToolResponse::Complete(
                guard.check_result(&name, result).await,
            )),
            CallToolResponse::Task(_) => Err(ErrorData::internal_error(
                format!(
                    "tools/call: the upstream MCP server answered the call to tool \"{name}\" with a task; the guard refuses tasks because their results would skip the output policies"
                ),
                None,
            )),
            other => Ok(other),
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = self
            .forward("tools/list", self.upstream().list_tools(request))
            .await?;
        result.tools = self.client.guard().filter_tools(result.tools).await;
        Ok(result)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.forward("completion/complete", self.upstream().complete(request))
            .await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward("logging/setLevel", self.upstream().set_level(request))
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.forward("prompts/get", self.upstream().get_prompt_once(request))
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.forward("prompts/list", self.upstream().list_prompts(request))
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.forward("resources/list", self.upstream().list_resources(request))
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.forward(
            "resources/templates/list",
            self.upstream().list_resource_templates(request),
        )
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.forward(
            "resources/read",
            self.upstream().read_resource_once(request),
        )
        .await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward("resources/subscribe", self.upstream().subscribe(request))
            .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(
            "resources/unsubscribe",
            self.upstream().unsubscribe(request),
        )
        .await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.clone();
        let answer = self
            .forward(
                &method,
                self.upstream()
                    .send_request(ClientRequest::CustomRequest(request)),
            )
            .await?;
        match answer {
            ServerResult::CustomResult(result) => Ok(result),
            _ => Err(upstream_error(&method, ServiceError::UnexpectedResponse)),
        }
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        // A notification has no answer to carry a failure; a gone upstream shows on the
        // next request.
        let _ = self.upstream().notify_roots_list_changed().await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleServer>,
    ) {
        let _ = self
            .upstream()
            .send_notification(ClientNotification::CustomNotification(notification))
            .await;
    }
}
