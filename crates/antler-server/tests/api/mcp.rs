//! G21 MCP settings routes over a real extensions_config.json.

use antler_mcp::Lookup;
use serde_json::{json, Value};

use crate::common::{json_of, Options, TestServer};

struct Setup {
    server: TestServer,
    dir: tempfile::TempDir,
}

async fn start(file: Option<Value>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    if let Some(doc) = file {
        std::fs::write(
            dir.path().join("extensions_config.json"),
            serde_json::to_string_pretty(&doc).unwrap(),
        )
        .unwrap();
    }
    let opts = Options {
        mcp_lookup: Some(Lookup::new(
            Some(&dir.path().join("config.yaml")),
            dir.path(),
        )),
        ..Options::default()
    };
    Setup {
        server: TestServer::start_with(Vec::new(), opts).await,
        dir,
    }
}

impl Setup {
    fn file(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.dir.path().join("extensions_config.json")).unwrap(),
        )
        .unwrap()
    }

    async fn patch(&self, body: Value) -> (u16, Value) {
        self.server.patch("/api/mcp/config", body).await
    }

    async fn put(&self, body: Value) -> (u16, Value) {
        let r = self
            .server
            .client
            .put(self.server.url("/api/mcp/config"))
            .json(&body)
            .send()
            .await
            .unwrap();
        json_of(r).await
    }
}

fn stored() -> Value {
    json!({
        "middlewares": [],
        "skills": {"pdf": {"enabled": false}},
        "mcpServers": {
            "github": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_TOKEN": "$GITHUB_TOKEN"},
                "description": "GitHub",
            },
            "remote": {
                "type": "http",
                "url": "http://127.0.0.1:9/mcp",
                "headers": {"X-Api-Key": "k-123"},
                "oauth": {"token_url": "http://127.0.0.1:9/token", "client_id": "id", "client_secret": "shh"},
            },
        },
    })
}

#[tokio::test]
async fn get_masks_secrets_and_fills_defaults() {
    let s = start(Some(stored())).await;
    let (code, body) = s.server.get("/api/mcp/config").await;
    assert_eq!(code, 200, "{body}");
    let gh = &body["mcp_servers"]["github"];
    assert_eq!(gh["type"], "stdio");
    assert_eq!(gh["enabled"], true);
    assert_eq!(gh["env"], json!({"GITHUB_TOKEN": "***"}));
    assert_eq!(gh["tool_name_prefix"], true);
    assert_eq!(gh["session_init_timeout"], json!(60.0));
    assert_eq!(gh["routing"]["mode"], "off");
    let remote = &body["mcp_servers"]["remote"];
    assert_eq!(remote["headers"], json!({"X-Api-Key": "***"}));
    assert_eq!(remote["oauth"]["client_secret"], Value::Null);
    assert_eq!(remote["oauth"]["client_id"], "id");
}

#[tokio::test]
async fn get_without_a_file_is_empty() {
    let s = start(None).await;
    let (code, body) = s.server.get("/api/mcp/config").await;
    assert_eq!((code, body), (200, json!({"mcp_servers": {}})));
}

#[tokio::test]
async fn put_round_trips_masks_and_keeps_the_rest_of_the_file() {
    let s = start(Some(stored())).await;
    let (_, mut got) = s.server.get("/api/mcp/config").await;
    got["mcp_servers"]["github"]["enabled"] = json!(false);
    got["mcp_servers"]["new"] = json!({"type": "sse", "url": "http://127.0.0.1:9/sse"});
    let (code, body) = s.put(got).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["mcp_servers"]["github"]["env"],
        json!({"GITHUB_TOKEN": "***"})
    );
    let file = s.file();
    assert_eq!(
        file["skills"],
        json!({"pdf": {"enabled": false}}),
        "other keys kept"
    );
    assert_eq!(file["middlewares"], json!([]));
    let gh = &file["mcpServers"]["github"];
    assert_eq!(gh["enabled"], false);
    assert_eq!(
        gh["env"]["GITHUB_TOKEN"], "$GITHUB_TOKEN",
        "the placeholder, not the mask"
    );
    let remote = &file["mcpServers"]["remote"];
    assert_eq!(remote["headers"]["X-Api-Key"], "k-123");
    assert_eq!(remote["oauth"]["client_secret"], "shh");
    assert_eq!(file["mcpServers"]["new"]["type"], "sse");
}

#[tokio::test]
async fn a_bad_body_is_422_naming_the_field_and_the_file_is_untouched() {
    let s = start(Some(stored())).await;
    let before = std::fs::read(s.dir.path().join("extensions_config.json")).unwrap();
    let cases = [
        (json!({"servers": {}}), "mcp_servers: required"),
        (
            json!({"mcp_servers": {"x": {"type": "http"}}}),
            "mcpServers.x.url",
        ),
        (
            json!({"mcp_servers": {"x": {"type": "stdio"}}}),
            "mcpServers.x.command",
        ),
        (
            json!({"mcp_servers": {"x": {"type": "ws", "url": "ws://a"}}}),
            "mcpServers.x.type",
        ),
        (
            json!({"mcp_servers": {"x": {"command": "a", "args": "not-a-list"}}}),
            "mcpServers.x.args",
        ),
        (
            json!({"mcp_servers": {"x": {"command": "a", "env": {"NEW": "***"}}}}),
            "mcp_servers.x.env.NEW",
        ),
        (
            json!({"mcp_servers": {"bad name": {"command": "a"}}}),
            "mcp_servers.bad name",
        ),
    ];
    for (body, field) in cases {
        let (code, resp) = s.put(body.clone()).await;
        assert_eq!(code, 422, "{body} → {resp}");
        let detail = resp["detail"].as_str().unwrap();
        assert!(detail.contains(field), "{body}: {detail}");
    }
    assert_eq!(
        std::fs::read(s.dir.path().join("extensions_config.json")).unwrap(),
        before
    );
}

#[tokio::test]
async fn patch_toggles_one_server() {
    let s = start(Some(stored())).await;
    let (code, body) = s
        .patch(json!({"server_name": "github", "enabled": false}))
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["mcp_servers"]["github"]["enabled"], false);
    assert_eq!(s.file()["mcpServers"]["github"]["enabled"], false);
    assert_eq!(
        s.file()["mcpServers"]["github"]["env"]["GITHUB_TOKEN"],
        "$GITHUB_TOKEN"
    );
    let (code, _) = s
        .patch(json!({"server_name": "nope", "enabled": true}))
        .await;
    assert_eq!(code, 404);
    let (code, body) = s.patch(json!({"server_name": "github"})).await;
    assert_eq!(code, 422);
    assert!(body["detail"].as_str().unwrap().contains("enabled"));
}

#[tokio::test]
async fn cache_reset_answers_as_deerflow() {
    let s = start(None).await;
    let (code, body) = s.server.post("/api/mcp/cache/reset", json!({})).await;
    assert_eq!(code, 200);
    assert_eq!(body["success"], true);
}
