//! Against the reference server, `@modelcontextprotocol/server-everything` (installed by
//! tests/peers/setup.sh), over stdio, streamable HTTP and the legacy SSE transport.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_mcp::ServerState;
use antler_protocol::{Content, ToolStatus};
use antler_runtime::{Tool, ToolOutput};
use common::{call, call_t1, everything, everything_http, text, tool, Fixture};
use serde_json::{json, Value};

async fn exercise(f: &Fixture) {
    let catalog = f.manager.refresh().await;
    assert_eq!(
        catalog.servers[0].state,
        ServerState::Ready,
        "{:?}",
        catalog.servers
    );
    let echo = tool(&catalog, "everything_echo");
    assert_eq!(
        echo.spec().parameters["properties"]["message"]["type"],
        json!("string"),
        "the server's schema reaches the model unchanged"
    );
    let out = call(&echo, "t1", None, json!({"message": "hello"})).await;
    assert_eq!(text(&out), ("Echo: hello".to_owned(), ToolStatus::Success));
    let sum = call_t1(&catalog, "everything_get-sum", json!({"a": 2, "b": 40})).await;
    assert_eq!(text(&sum).0, "The sum of 2 and 40 is 42.");
    match call_t1(&catalog, "everything_get-tiny-image", json!({})).await {
        ToolOutput::Content {
            content: Content::Blocks(blocks),
            status,
            ..
        } => {
            assert_eq!(status, ToolStatus::Success);
            let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
            assert_eq!(kinds, ["text", "image_url", "text"]);
            assert!(blocks[1]["image_url"]["url"]
                .as_str()
                .unwrap()
                .starts_with("data:image/png;base64,iVBOR"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn stdio() {
    let Some(entry) = everything() else { return };
    let f = Fixture::new(json!({"everything": {"command": "node", "args": [entry, "stdio"]}}));
    exercise(&f).await;
    let catalog = f.manager.refresh().await;
    // An embedded text resource comes back as its text.
    let out = call_t1(&catalog, "everything_get-resource-reference", json!({})).await;
    let (body, status) = text(&out);
    assert_eq!(status, ToolStatus::Success);
    assert!(
        body.contains("Resource 1: This is a plaintext resource"),
        "{body}"
    );
    // Resource links are named in the text, so every model sees them.
    let out = call_t1(
        &catalog,
        "everything_get-resource-links",
        json!({"count": 2}),
    )
    .await;
    assert_eq!(
        text(&out).0.matches("Resource link: ").count(),
        2,
        "{:?}",
        text(&out)
    );
    // Structured content rides in the artifact.
    match call_t1(
        &catalog,
        "everything_get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await
    {
        ToolOutput::Content { artifact, .. } => {
            assert!(
                artifact["structured_content"]["temperature"].is_number(),
                "{artifact}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn streamable_http() {
    exercise_http("streamableHttp", |port| {
        json!({
            "type": "http",
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "headers": {"X-Test": "1"},
        })
    })
    .await;
}

#[tokio::test]
async fn legacy_sse() {
    // `transport` is accepted as DeerFlow's alias of `type`.
    exercise_http(
        "sse",
        |port| json!({"transport": "sse", "url": format!("http://127.0.0.1:{port}/sse")}),
    )
    .await;
}

/// Serve the `everything` server over HTTP in `mode` and exercise it configured as
/// `entry(port)` (skipped when the server is not installed).
async fn exercise_http(mode: &str, entry: impl FnOnce(u16) -> Value) {
    let Some(server) = everything() else { return };
    let (_server, port) = everything_http(&server, mode);
    exercise(&Fixture::new(json!({ "everything": entry(port) }))).await;
}
