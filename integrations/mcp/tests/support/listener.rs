//! The guard on its own HTTP listener ([`GuardedListener`]), on 127.0.0.1, in front of the
//! scripted upstream: for the tests of the listener's limits.

use std::net::SocketAddr;
use std::sync::Arc;

use portcullis_engine::PolicyEngine;
use portcullis_mcp::{GuardedListener, GuardedServer, ListenerOptions};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::upstream::Upstream;
use super::{Client, TestError, connect_in_process, engine, tool_guard};

/// A guarded listener on 127.0.0.1 in front of the scripted upstream.
pub struct Running {
    pub address: SocketAddr,
    pub upstream: Upstream,
    pub stats: portcullis_mcp::ListenerStats,
    pub stop: Option<oneshot::Sender<()>>,
    pub served: JoinHandle<std::io::Result<()>>,
    _upstream_client: Client,
}

impl Running {
    /// With the tests' engine ([`engine`]).
    pub async fn start(options: ListenerOptions) -> Result<Running, TestError> {
        Running::start_on(options, engine().0).await
    }

    /// With `engine`.
    pub async fn start_on(
        options: ListenerOptions,
        engine: Arc<PolicyEngine>,
    ) -> Result<Running, TestError> {
        let upstream = Upstream::default();
        let (upstream_client, upstream_server) = connect_in_process(upstream.clone()).await?;
        // The upstream serves as long as the test runs.
        std::mem::forget(upstream_server);
        let guarded = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
        let listener =
            GuardedListener::new(guarded, StreamableHttpServerConfig::default(), options);
        let stats = listener.stats();
        let tcp = TcpListener::bind("127.0.0.1:0").await?;
        let address = tcp.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(listener.serve_until(tcp, async move {
            let _ = stopped.await;
        }));
        Ok(Running {
            address,
            upstream,
            stats,
            stop: Some(stop),
            served,
            _upstream_client: upstream_client,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// A client, with `token` when given.
    pub async fn client(&self, token: Option<&str>) -> Result<Client, TestError> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        Ok(
            ().serve(StreamableHttpClientTransport::from_config(config))
                .await?,
        )
    }
}
