//! Tool results that embed resources, through the guard with rmcp on both sides: the text of
//! an embedded resource is checked like a text block, a blob passes as it came.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use portcullis_engine::InterceptionPoint;
use portcullis_mcp::{GuardedClient, GuardedServer, denial};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;
use support::{TestError, connect_in_process, engine, tool_guard};

/// A blob: the bytes `123-45-6789`, base64.
const BLOB: &str = "MTIzLTQ1LTY3ODk=";

/// An upstream whose tools answer with embedded resources.
#[derive(Debug, Clone, Default)]
struct Resources;

impl ServerHandler for Resources {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"});
        let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("read_record", "Reads a record.", Arc::clone(&schema)),
            Tool::new("launch_file", "Reads the launch file.", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let content = match request.name.as_ref() {
            "read_record" => vec![
                ContentBlock::text("The record:"),
                ContentBlock::embedded_text("file:///record.txt", "Jane Roe, SSN 123-45-6789"),
                ContentBlock::resource(
                    ResourceContents::blob(BLOB, "file:///record.bin")
                        .with_mime_type("application/octet-stream"),
                ),
            ],
            "launch_file" => vec![ContentBlock::embedded_text(
                "file:///launch.txt",
                "the launch codes are 0000",
            )],
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named {other}"),
                    None,
                ));
            }
        };
        Ok(CallToolResponse::Complete(CallToolResult::success(content)))
    }
}

fn resource(result: &CallToolResult, index: usize) -> Option<&ResourceContents> {
    result
        .content
        .get(index)
        .and_then(ContentBlock::as_resource)
        .map(|embedded| &embedded.resource)
}

async fn check(
    call: impl AsyncFn(&'static str) -> Result<CallToolResult, TestError>,
) -> Result<(), TestError> {
    // The resource's text is redacted where it is; the text block and the blob stay.
    let result = call("read_record").await?;
    assert_eq!(result.is_error, Some(false));
    assert_eq!(result.content.len(), 3, "{result:?}");
    assert_eq!(
        result.content[0].as_text().map(|text| text.text.as_str()),
        Some("The record:")
    );
    match resource(&result, 1) {
        Some(ResourceContents::TextResourceContents { uri, text, .. }) => {
            assert_eq!(uri, "file:///record.txt");
            assert_eq!(text, "Jane Roe, SSN [REDACTED]");
        }
        other => panic!("expected the text resource, got {other:?}"),
    }
    match resource(&result, 2) {
        Some(ResourceContents::BlobResourceContents { blob, .. }) => assert_eq!(blob, BLOB),
        other => panic!("expected the blob, got {other:?}"),
    }

    // A denial reads the resource's text too.
    let result = call("launch_file").await?;
    assert_eq!(result.is_error, Some(true));
    let denial = denial(&result).expect("a denial");
    assert_eq!(denial.policy_id(), "no_launch_codes");
    assert_eq!(denial.interception_point(), InterceptionPoint::Output);
    assert!(!format!("{result:?}").contains("0000"), "{result:?}");
    Ok(())
}

#[tokio::test]
async fn embedded_resources_through_a_guarded_server() -> Result<(), TestError> {
    let (engine, audit) = engine();
    let (upstream_client, _upstream) = connect_in_process(Resources).await?;
    let guarded = GuardedServer::new(upstream_client.peer().clone(), tool_guard(&engine));
    let (client, _guard) = connect_in_process(guarded).await?;
    let peer: &Peer<RoleClient> = client.peer();
    check(async |name| Ok(peer.call_tool(CallToolRequestParams::new(name)).await?)).await?;
    // The output policies read the resource's text.
    let outputs = audit.contexts("output");
    assert!(
        outputs
            .iter()
            .any(|context| context["response"]["content"]
                == "The record:\nJane Roe, SSN 123-45-6789"),
        "{outputs:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn embedded_resources_through_a_guarded_client() -> Result<(), TestError> {
    let (engine, _audit) = engine();
    let (upstream_client, _upstream) = connect_in_process(Resources).await?;
    let guarded = GuardedClient::new(upstream_client.peer().clone(), tool_guard(&engine));
    check(async |name| Ok(guarded.call_tool(CallToolRequestParams::new(name)).await?)).await
}
