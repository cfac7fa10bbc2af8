//! What the upstream tells the client: its notifications, relayed through the guard.

use std::sync::{Arc, Mutex};

use rmcp::ClientHandler;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::{NotificationContext, Peer, RoleClient, RoleServer};

/// The client handler of a guard's upstream connection: relays the upstream's notifications
/// to the client connected to the guard.
///
/// Connect the upstream with it (`UpstreamRelay::default().serve(transport)` instead of
/// `().serve(transport)`) and hand a clone to [`GuardedServer::relay`]; the server attaches
/// the client that initializes a session. Relayed: the tools, prompts and resources lists
/// changed, a resource updated, and log messages. When several clients share one upstream
/// connection, the client that initialized last receives them: serve several clients with
/// [`GuardedServer::per_session`] instead, which gives each its own connection and relay.
///
/// The upstream's requests to the client (sampling, elicitation, roots) are not relayed:
/// they are answered as rmcp's default client answers them.
///
/// [`GuardedServer::relay`]: crate::GuardedServer::relay
/// [`GuardedServer::per_session`]: crate::GuardedServer::per_session
#[derive(Debug, Clone, Default)]
pub struct UpstreamRelay {
    client: Arc<Mutex<Option<Peer<RoleServer>>>>,
}

impl UpstreamRelay {
    /// Sends the upstream's notifications to `client` from now on.
    pub(crate) fn attach(&self, client: Peer<RoleServer>) {
        if let Ok(mut attached) = self.client.lock() {
            *attached = Some(client);
        }
    }

    fn client(&self) -> Option<Peer<RoleServer>> {
        self.client.lock().ok().and_then(|client| client.clone())
    }
}

// A notification has no answer to carry a failure: one the client cannot take is dropped.
impl ClientHandler for UpstreamRelay {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(client) = self.client() {
            let _ = client.notify_tool_list_changed().await;
        }
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(client) = self.client() {
            let _ = client.notify_prompt_list_changed().await;
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(client) = self.client() {
            let _ = client.notify_resource_list_changed().await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(client) = self.client() {
            let _ = client.notify_resource_updated(params).await;
        }
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(client) = self.client() {
            let _ = client.notify_logging_message(params).await;
        }
    }
}
