//! The server form: an MCP server in front of another, guarding its tools.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use portcullis_engine::BoxError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientNotification, ClientRequest,
    CompleteRequestParams, CompleteResult, CustomNotification, CustomRequest, CustomResult,
    DiscoverResult, ErrorCode, GetPromptRequestParams, GetPromptResponse, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, ServerResult, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{
    NotificationContext, Peer, RequestContext, RoleClient, RoleServer, RunningService, Service,
    ServiceError,
};
use rmcp::{ErrorData, ServerHandler};
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::approval::{self, Asked};
use crate::client::GuardedClient;
use crate::guard::{CallCheck, ToolGuard};
use crate::relay::UpstreamRelay;

/// An MCP server that serves what an upstream MCP server offers, with its tools guarded.
///
/// Serve it like any rmcp server handler: on stdio
/// (`guarded.serve(rmcp::transport::stdio())`), on any async reader and writer, or on
/// streamable HTTP ([`streamable_http_service`](Self::streamable_http_service)).
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
/// - `resources/read` and `prompts/get` results go through the result policies
///   ([`ToolGuard::check_resource`], [`ToolGuard::check_prompt`]); a refusal is a JSON-RPC
///   error ([`DENIAL_ERROR_CODE`](crate::DENIAL_ERROR_CODE)).
/// - `initialize` answers with the upstream's server info, instructions and capabilities
///   (without the tasks extension, which would let results skip the output policies).
/// - Lists of prompts, resources and templates, completion, logging level, subscriptions
///   and the client's `roots/list_changed` notification are passed to the upstream as they
///   are.
/// - A request of a method MCP defines whose params do not parse (a `tools/call` whose
///   `arguments` is not an object) is refused with an invalid-params error and never
///   reaches the upstream. Methods MCP does not define are refused (method not found), and
///   notifications of such methods dropped, unless listed with
///   [`pass_through_method`](Self::pass_through_method).
/// - An upstream that is gone, does not answer in time, or answers something that is not
///   a valid response makes the one request fail with a JSON-RPC internal error that says
///   so; the guard keeps serving.
#[derive(Debug, Clone)]
pub struct GuardedServer {
    upstream: Upstream,
    relay: Option<UpstreamRelay>,
    pass_through: Arc<[String]>,
}

/// The connection a [`GuardedServer`] forwards to.
#[derive(Clone)]
enum Upstream {
    /// One connection, shared by every session served.
    Shared(GuardedClient),
    /// A connection of this session's own, made when its client initializes.
    PerSession {
        guard: ToolGuard,
        connect: Arc<Connector>,
        /// One permit per session connected, shared by all sessions.
        sessions: Arc<Semaphore>,
        connected: Arc<OnceCell<(GuardedClient, OwnedSemaphorePermit)>>,
    },
}

/// How many sessions a [`per_session`](GuardedServer::per_session) server connects at once
/// by default.
pub const DEFAULT_MAX_SESSIONS: usize = 64;

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Shared(client) => f.debug_tuple("Shared").field(client).finish(),
            Upstream::PerSession {
                guard, connected, ..
            } => f
                .debug_struct("PerSession")
                .field("guard", guard)
                .field("connected", &connected.get().map(|(client, _)| client))
                .finish_non_exhaustive(),
        }
    }
}

/// The future of an upstream connection being made.
pub type Connecting = Pin<
    Box<dyn Future<Output = Result<RunningService<RoleClient, UpstreamRelay>, BoxError>> + Send>,
>;

/// Makes a session's own upstream connection, with the relay its notifications go through.
type Connector = dyn Fn(UpstreamRelay) -> Connecting + Send + Sync;

/// MCP's own client requests: one of these that reaches [`on_custom_request`] is a request
/// whose params did not parse, never something to pass through.
///
/// [`on_custom_request`]: ServerHandler::on_custom_request
const MCP_REQUEST_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// MCP's own client notifications, which never pass as unknown ones.
const MCP_NOTIFICATION_METHODS: &[&str] = &[
    "notifications/cancelled",
    "notifications/progress",
    "notifications/initialized",
    "notifications/roots/list_changed",
    "notifications/elicitation/response",
];

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
    /// time-out). Every session served shares that one upstream connection.
    pub fn from_client(client: GuardedClient) -> Self {
        GuardedServer {
            upstream: Upstream::Shared(client),
            relay: None,
            pass_through: Arc::from([]),
        }
    }

    /// A server whose every session has an upstream connection of its own: when a client
    /// initializes, `connect` is called with a relay for that client's notifications
    /// (connect the upstream with it: `relay.serve(transport)`), and the connection closes
    /// when the session ends. Over streamable HTTP
    /// ([`streamable_http_service`](Self::streamable_http_service)) each client thus has
    /// its own upstream session, and the upstream's notifications reach the client whose
    /// session they belong to. A connection that fails answers the client's `initialize`
    /// with an error.
    pub fn per_session<F, Fut>(guard: ToolGuard, connect: F) -> Self
    where
        F: Fn(UpstreamRelay) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<RunningService<RoleClient, UpstreamRelay>, BoxError>>
            + Send
            + 'static,
    {
        GuardedServer {
            upstream: Upstream::PerSession {
                guard,
                connect: Arc::new(move |relay| -> Connecting { Box::pin(connect(relay)) }),
                sessions: Arc::new(Semaphore::new(DEFAULT_MAX_SESSIONS)),
                connected: Arc::default(),
            },
            relay: None,
            pass_through: Arc::from([]),
        }
    }

    /// How many sessions of a [`per_session`](Self::per_session) server may hold an
    /// upstream connection at once (default [`DEFAULT_MAX_SESSIONS`], at least 1); a client
    /// beyond them is refused when it initializes, until a session ends. No effect on a
    /// server with one shared connection.
    pub fn max_sessions(mut self, sessions: usize) -> Self {
        if let Upstream::PerSession {
            sessions: slots, ..
        } = &mut self.upstream
        {
            *slots = Arc::new(Semaphore::new(sessions.max(1)));
        }
        self
    }

    /// Relays the upstream's notifications through `relay`, the client handler its
    /// connection was made with, to the client that initializes a session with this server.
    /// (A server made with [`per_session`](Self::per_session) relays each session's own.)
    pub fn relay(mut self, relay: UpstreamRelay) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Passes requests and notifications of `method`, one MCP does not define, to the
    /// upstream as they are (repeatable). Unlisted unknown methods are refused with a
    /// method-not-found error. A method MCP defines cannot be passed through this way: its
    /// requests are checked, or refused when their params do not parse.
    pub fn pass_through_method(mut self, method: impl Into<String>) -> Self {
        let mut methods = self.pass_through.to_vec();
        methods.push(method.into());
        self.pass_through = Arc::from(methods);
        self
    }

    /// A tower service serving this guard on streamable HTTP, one clone per session
    /// (mount it at the MCP endpoint's path: `/mcp` by convention). Sessions live in memory.
    /// With [`per_session`](Self::per_session), each session connects its own upstream.
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
            move || Ok(self.new_session()),
            Arc::default(),
            config,
        )
    }

    /// The server a new session gets: a clone, with a connection of its own to make when it
    /// is [`per_session`](Self::per_session).
    fn new_session(&self) -> GuardedServer {
        let mut session = self.clone();
        if let Upstream::PerSession { connected, .. } = &mut session.upstream {
            *connected = Arc::default();
        }
        session
    }

    /// The guarded upstream connection: `None` for a [`per_session`](Self::per_session)
    /// server whose session has not made its connection yet.
    pub fn client(&self) -> Option<&GuardedClient> {
        match &self.upstream {
            Upstream::Shared(client) => Some(client),
            Upstream::PerSession { connected, .. } => connected.get().map(|(client, _)| client),
        }
    }

    /// The connection, for a request of `method` from `client`: a
    /// [`per_session`](Self::per_session) server makes its session's own on the first
    /// request (`initialize`, or any request of a session-less client), relaying the
    /// upstream's notifications to `client`.
    async fn connected(
        &self,
        method: &str,
        client: &Peer<RoleServer>,
    ) -> Result<&GuardedClient, ErrorData> {
        let (guard, connect, sessions, connected) = match &self.upstream {
            Upstream::Shared(shared) => return Ok(shared),
            Upstream::PerSession {
                guard,
                connect,
                sessions,
                connected,
            } => (guard, connect, sessions, connected),
        };
        let (client, _) = connected
            .get_or_try_init(|| async {
                let Ok(session) = Arc::clone(sessions).try_acquire_owned() else {
                    return Err(ErrorData::internal_error(
                        format!(
                            "{method}: the guard serves as many sessions as it may; try again once one ends"
                        ),
                        None,
                    ));
                };
                let relay = UpstreamRelay::default();
                relay.attach(client.clone());
                let running = connect(relay).await.map_err(|error| {
                    ErrorData::internal_error(
                        format!("{method}: the upstream MCP server did not initialize: {error}"),
                        None,
                    )
                })?;
                Ok((GuardedClient::from_running(running, guard.clone()), session))
            })
            .await?;
        Ok(client)
    }

    /// Sends `method` upstream: `request` builds it from the connection.
    async fn forward<'a, T, Fut>(
        &'a self,
        method: &str,
        context: &RequestContext<RoleServer>,
        request: impl FnOnce(&'a Peer<RoleClient>) -> Fut,
    ) -> Result<T, ErrorData>
    where
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let client = self.connected(method, &context.peer).await?;
        client
            .upstream(request(client.peer()))
            .await
            .map_err(|error| upstream_error(method, error))
    }

    /// [`forward`](Self::forward), given up when the client cancels its request: the
    /// upstream request is dropped, and rmcp tells the upstream it is cancelled.
    async fn forward_cancellable<'a, T, Fut>(
        &'a self,
        method: &str,
        context: &RequestContext<RoleServer>,
        request: impl FnOnce(&'a Peer<RoleClient>) -> Fut,
    ) -> Result<T, ErrorData>
    where
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        tokio::select! {
            answer = self.forward(method, context, request) => answer,
            () = context.ct.cancelled() => Err(ErrorData::internal_error(
                format!("{method}: the client cancelled the request"),
                None,
            )),
        }
    }

    /// Whether requests and notifications of `method` go to the upstream unchecked.
    fn passes_through(&self, method: &str) -> bool {
        !MCP_REQUEST_METHODS.contains(&method)
            && !MCP_NOTIFICATION_METHODS.contains(&method)
            && self.pass_through.iter().any(|listed| listed == method)
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
        let Some(upstream) = self.client().and_then(|client| client.peer().peer_info()) else {
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
        if let Upstream::Shared(_) = &self.upstream
            && let Some(relay) = &self.relay
        {
            relay.attach(context.peer.clone());
        }
        self.connected("initialize", &context.peer).await?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        self.connected("server/discover", &context.peer).await?;
        Ok(DiscoverResult::from_server_info(
            ServerHandler::supported_protocol_versions(self).into_owned(),
            ServerHandler::get_info(self),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let client = self.connected("tools/call", &context.peer).await?;
        let guard = client.guard();
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
        let arguments = params.arguments.clone().unwrap_or_default();
        match self
            .forward_cancellable("tools/call", &context, |peer| peer.call_tool_once(params))
            .await?
        {
            CallToolResponse::Complete(result) => Ok(CallToolResponse::Complete(
                guard.check_result(&name, arguments, result).await,
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = self
            .forward("tools/list", &context, |peer| peer.list_tools(request))
            .await?;
        let guard = self.connected("tools/list", &context.peer).await?.guard();
        result.tools = guard.filter_tools(result.tools).await;
        Ok(result)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.forward("completion/complete", &context, |peer| {
            peer.complete(request)
        })
        .await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward("logging/setLevel", &context, |peer| peer.set_level(request))
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let params = request.clone();
        match self
            .forward("prompts/get", &context, |peer| {
                peer.get_prompt_once(request)
            })
            .await?
        {
            GetPromptResponse::Complete(result) => {
                let guard = self.connected("prompts/get", &context.peer).await?.guard();
                Ok(GetPromptResponse::Complete(
                    guard.check_prompt(&params, result).await?,
                ))
            }
            // A request for more input carries no prompt text; the retried request is
            // checked again.
            other => Ok(other),
        }
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.forward("prompts/list", &context, |peer| peer.list_prompts(request))
            .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.forward("resources/list", &context, |peer| {
            peer.list_resources(request)
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.forward("resources/templates/list", &context, |peer| {
            peer.list_resource_templates(request)
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let params = request.clone();
        match self
            .forward("resources/read", &context, |peer| {
                peer.read_resource_once(request)
            })
            .await?
        {
            ReadResourceResponse::Complete(result) => {
                let guard = self
                    .connected("resources/read", &context.peer)
                    .await?
                    .guard();
                Ok(ReadResourceResponse::Complete(
                    guard.check_resource(&params, result).await?,
                ))
            }
            // A request for more input carries no resource text; the retried request is
            // checked again.
            other => Ok(other),
        }
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward("resources/subscribe", &context, |peer| {
            peer.subscribe(request)
        })
        .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward("resources/unsubscribe", &context, |peer| {
            peer.unsubscribe(request)
        })
        .await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method.clone();
        if MCP_REQUEST_METHODS.contains(&method.as_str()) {
            // rmcp hands over a request of a method it knows when its params do not parse:
            // refused here, it never reaches the upstream unchecked.
            return Err(ErrorData::invalid_params(
                format!("{method}: the params do not parse as MCP defines them"),
                None,
            ));
        }
        if !self.passes_through(&method) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{method}: the guard does not pass this method to the upstream"),
                None,
            ));
        }
        let answer = self
            .forward(&method, &context, |peer| {
                peer.send_request(ClientRequest::CustomRequest(request))
            })
            .await?;
        match answer {
            ServerResult::CustomResult(result) => Ok(result),
            _ => Err(upstream_error(&method, ServiceError::UnexpectedResponse)),
        }
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        // A notification has no answer to carry a failure; a gone upstream shows on the
        // next request.
        if let Some(client) = self.client() {
            let _ = client.peer().notify_roots_list_changed().await;
        }
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleServer>,
    ) {
        // Unknown notifications are dropped unless listed to pass.
        if !self.passes_through(&notification.method) {
            return;
        }
        if let Some(client) = self.client() {
            let _ = client
                .peer()
                .send_notification(ClientNotification::CustomNotification(notification))
                .await;
        }
    }
}
