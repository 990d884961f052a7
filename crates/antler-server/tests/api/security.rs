//! Deployment safety (spec 70 §0.3, §0.4, §7): API keys, per-user thread ownership (other users
//! get 404), CORS off by default, request size limits, and malformed input that never yields a
//! 5xx or a half-created run.

use antler_server::{ApiKey, ServerConfig};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::*;
use crate::gateway::upload;

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-0123456789ab";

/// The keys of the two users most tests use.
fn alice_and_bob() -> Vec<ApiKey> {
    [(ALICE, "alice"), (BOB, "bob")]
        .map(|(key, user_id)| ApiKey {
            key: key.into(),
            user_id: user_id.into(),
        })
        .into()
}

async fn keyed() -> TestServer {
    TestServer::start_with(
        vec![ScriptedReply::text("hello alice")],
        Options {
            config: ServerConfig {
                api_keys: alice_and_bob(),
                ..Options::default().config
            },
            ..Options::default()
        },
    )
    .await
}

#[tokio::test]
async fn keys_are_required_and_threads_are_private() {
    let s = keyed().await;
    // No key: 401 with the auth error shape; /health and the setup probe stay public.
    let (code, e) = s.get("/api/models").await;
    assert_eq!(code, 401);
    assert_eq!(e["detail"]["code"], "not_authenticated");
    let (code, _) = s.with_key("wrong-key-0123456789").get("/api/models").await;
    assert_eq!(code, 401);
    let (code, _) = s.get("/health").await;
    assert_eq!(code, 200);
    let (code, _) = s.get("/api/v1/auth/setup-status").await;
    assert_eq!(code, 200);
    // x-api-key works too (langgraph-sdk's LANGGRAPH_API_KEY).
    let r = s
        .raw("GET", "/api/v1/auth/me", &[("x-api-key", ALICE)])
        .await;
    let (code, me) = json_of(r).await;
    assert_eq!((code, me["id"].as_str()), (200, Some("alice")));

    s.with_key(ALICE).thread("a1").await;
    let (code, _) = s
        .with_key(ALICE)
        .wait_run("a1", json!({"input": say("hi")}))
        .await;
    assert_eq!(code, 200);
    let (_, runs) = s.with_key(ALICE).get("/api/threads/a1/runs").await;
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    // Alice's files live under her user folder.
    let (_, st) = s.with_key(ALICE).get("/api/threads/a1/state").await;
    let ws = st["values"]["thread_data"]["workspace_path"]
        .as_str()
        .unwrap();
    assert!(
        ws.ends_with("users/alice/threads/a1/user-data/workspace"),
        "{ws}"
    );

    // Bob sees nothing of it: every route answers as if it did not exist.
    for (method, path, body) in [
        ("GET", "/api/threads/a1".to_owned(), None),
        ("GET", "/api/threads/a1/state".to_owned(), None),
        (
            "PATCH",
            "/api/threads/a1".to_owned(),
            Some(json!({"metadata": {"x": 1}})),
        ),
        ("DELETE", "/api/threads/a1".to_owned(), None),
        (
            "POST",
            "/api/threads/a1/state".to_owned(),
            Some(json!({"values": {"title": "x"}})),
        ),
        (
            "POST",
            "/api/threads/a1/runs/stream".to_owned(),
            Some(json!({"input": say("x")})),
        ),
        (
            "POST",
            "/api/threads/a1/runs".to_owned(),
            Some(json!({"input": say("x")})),
        ),
        ("GET", "/api/threads/a1/runs".to_owned(), None),
        ("GET", format!("/api/threads/a1/runs/{run}"), None),
        ("POST", format!("/api/threads/a1/runs/{run}/cancel"), None),
        ("GET", format!("/api/threads/a1/runs/{run}/stream"), None),
        ("GET", format!("/api/threads/a1/runs/{run}/join"), None),
        ("GET", "/api/threads/a1/messages/page".to_owned(), None),
        ("GET", "/api/threads/a1/uploads/list".to_owned(), None),
        ("GET", "/api/threads/a1/token-usage".to_owned(), None),
    ] {
        let (code, e) = s.with_key(BOB).send(method, &path, body).await;
        assert_eq!(code, 404, "{method} {path}: {e}");
        assert!(e["detail"].is_string(), "{e}");
    }
    let (code, h) = s
        .with_key(BOB)
        .post("/api/threads/a1/history", json!({}))
        .await;
    assert_eq!((code, h), (200, json!([])));
    let (_, list) = s.with_key(BOB).post("/api/threads/search", json!({})).await;
    assert_eq!(list, json!([]));
    let (_, list) = s
        .with_key(ALICE)
        .post("/api/threads/search", json!({}))
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    // Bob cannot take over Alice's id either.
    let (code, _) = s.with_key(BOB).create_thread("a1").await;
    assert_eq!(code, 409);
    // Nor read her files through the artifact route.
    let (code, _) = s
        .with_key(BOB)
        .get("/api/threads/a1/artifacts/mnt/user-data/uploads/x")
        .await;
    assert_eq!(code, 404);
    // Alice still can.
    let (code, t) = s.with_key(ALICE).get("/api/threads/a1").await;
    assert_eq!((code, t["status"].as_str()), (200, Some("idle")));
}

#[tokio::test]
async fn cors_is_off_by_default_and_exposes_content_location_when_on() {
    let s = TestServer::start(vec![]).await;
    let r = s
        .raw("GET", "/api/models", &[("origin", "http://evil.example")])
        .await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let s = TestServer::start_with(
        vec![],
        Options {
            config: ServerConfig {
                cors_origins: vec!["http://ui.example:3000".into()],
                ..Options::default().config
            },
            ..Options::default()
        },
    )
    .await;
    let r = s
        .client
        .request(
            reqwest::Method::OPTIONS,
            s.url("/api/threads/t/runs/stream"),
        )
        .header("origin", "http://ui.example:3000")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,x-csrf-token",
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://ui.example:3000"
    );
    assert_eq!(r.headers()["access-control-allow-credentials"], "true");
    let r = s
        .raw(
            "GET",
            "/api/models",
            &[("origin", "http://ui.example:3000")],
        )
        .await;
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(exposed.contains("content-location"), "{exposed}");
    let r = s
        .raw("GET", "/api/models", &[("origin", "http://evil.example")])
        .await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn malformed_input_is_a_json_4xx_never_a_5xx() {
    let s = TestServer::start_with(
        vec![],
        Options {
            config: ServerConfig {
                max_body_bytes: 64 * 1024,
                ..Options::default().config
            },
            ..Options::default()
        },
    )
    .await;
    s.thread("t1").await;
    let bodies: [&'static str; 12] = [
        "{",
        "nul",
        "[1,2",
        "\"just a string\"",
        "{\"input\": 5}",
        "{\"input\": {\"messages\": \"no\"}}",
        "{\"input\": {\"messages\": [42]}}",
        "{\"stream_mode\": 7}",
        "{\"config\": []}",
        "{\"metadata\": \"x\"}",
        "{\"checkpoint\": 1}",
        "{\"assistant_id\": \"\"}",
    ];
    let paths = [
        "/api/threads",
        "/api/threads/search",
        "/api/threads/t1/runs/stream",
        "/api/threads/t1/runs",
        "/api/threads/t1/runs/wait",
        "/api/runs/stream",
        "/api/threads/t1/state",
        "/api/threads/t1/history",
        "/api/assistants/search",
        "/api/memory/facts",
    ];
    for path in paths {
        for body in bodies {
            let (code, e) = s.post_raw(path, body).await;
            // Some bodies are valid for some routes (unknown fields of a thread body are
            // ignored); none may fail the server.
            assert!(
                code == 200 || (400..500).contains(&code),
                "{path} {body}: {code} {e}"
            );
            if code >= 400 {
                assert!(e["detail"].is_string(), "{path} {body}: {e}");
            }
        }
    }
    // Nothing was admitted by any of them.
    let (_, runs) = s.get("/api/threads/t1/runs").await;
    assert_eq!(runs, json!([]));
    // Bodies over the limit: 413 with a JSON detail.
    let big = json!({"input": say(&"x".repeat(100 * 1024))});
    let (code, e) = s.post("/api/threads/t1/runs/stream", big).await;
    assert_eq!(code, 413);
    assert!(e["detail"].is_string());
    // Unknown ids.
    let (code, e) = s.get("/api/threads/t1/runs/no-such-run").await;
    assert_eq!(
        (code, e),
        (404, json!({"detail": "Run no-such-run not found"}))
    );
    let (code, _) = s.get("/api/threads/bad%20id").await;
    assert_eq!(code, 422);
    let (code, _) = s.get("/api/threads/t1/runs?limit=abc").await;
    assert_eq!(code, 422);
    // The upload route keeps its own (larger) limit and answers JSON too.
    let (code, up) = upload(&s, "t1", &[("a.txt", &[1u8; 100 * 1024])]).await;
    assert_eq!(code, 200, "{up}");
}

#[test]
fn binding_beyond_loopback_needs_a_key() {
    let open = ServerConfig {
        host: "0.0.0.0".parse().unwrap(),
        ..ServerConfig::default()
    };
    let err = open.validate().unwrap_err().to_string();
    assert!(
        err.contains("refusing to listen on 0.0.0.0 without authentication"),
        "{err}"
    );
    let keyed = ServerConfig {
        api_keys: vec![ApiKey {
            key: ALICE.into(),
            user_id: "alice".into(),
        }],
        ..open
    };
    assert!(keyed.validate().is_ok());
}

// ---------------------------------------------------------------- sandbox isolation

const SECRET: &str = "ALICE-SECRET-4242";

/// Two keyed users with the file tools, the model scripted for: Alice saves a secret (two
/// replies), then Bob reads her file's virtual path and writes one of his own (two replies).
async fn keyed_with_files() -> TestServer {
    let replies = vec![
        ScriptedReply::tool_call(
            "alice-w",
            "write_file",
            json!({"description": "save", "path": "/mnt/user-data/workspace/secret.txt", "content": SECRET}),
        ),
        ScriptedReply::text("saved"),
        ScriptedReply::tool_calls([
            (
                "bob-r".to_owned(),
                "read_file".to_owned(),
                json!({"description": "peek", "path": "/mnt/user-data/workspace/secret.txt"}),
            ),
            (
                "bob-w".to_owned(),
                "write_file".to_owned(),
                json!({"description": "drop", "path": "/mnt/user-data/workspace/x", "content": "from bob"}),
            ),
        ]),
        ScriptedReply::text("done"),
    ];
    TestServer::start_with(
        replies,
        Options {
            config: ServerConfig {
                api_keys: alice_and_bob(),
                ..Options::default().config
            },
            extra_tools: vec![
                antler_config::ToolConfig::new(
                    "read_file",
                    "file:read",
                    "deerflow.sandbox.tools:read_file_tool",
                ),
                antler_config::ToolConfig::new(
                    "write_file",
                    "file:write",
                    "deerflow.sandbox.tools:write_file_tool",
                ),
            ],
            ..Options::default()
        },
    )
    .await
}

/// The content of the tool message answering `call_id` in a `values` object.
fn tool_text(values: &Value, call_id: &str) -> String {
    let m = values["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["type"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool message for {call_id}: {values}"));
    match &m["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Alice creates thread `a1`, Bob `b1`.
async fn alice_and_bob_threads(s: &TestServer) {
    for (key, thread) in [(ALICE, "a1"), (BOB, "b1")] {
        s.with_key(key).thread(thread).await;
    }
}

/// Alice and Bob each create a thread (`a1`, `b1`); Alice saves a secret in her workspace
/// through a run. Returns her sandbox id and thread folders as her state records them.
async fn alice_saves_a_secret(s: &TestServer) -> (String, Value) {
    alice_and_bob_threads(s).await;
    let (code, done) = s
        .with_key(ALICE)
        .wait_run("a1", json!({"input": say("keep this safe")}))
        .await;
    assert_eq!(code, 200, "{done}");
    let alice_ws = s
        .home
        .path()
        .join("users/alice/threads/a1/user-data/workspace");
    assert_eq!(
        std::fs::read_to_string(alice_ws.join("secret.txt")).unwrap(),
        SECRET
    );
    let alice_sandbox = done["sandbox"]["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(alice_sandbox, "local:alice:a1");
    let alice_data = done["thread_data"].clone();
    assert!(alice_data["workspace_path"].is_string(), "{done}");
    (alice_sandbox, alice_data)
}

#[tokio::test]
async fn clients_cannot_write_the_sandbox_or_thread_folders() {
    let s = keyed_with_files().await;
    let (alice_sandbox, alice_data) = alice_saves_a_secret(&s).await;

    // State updates may not name a sandbox or thread folders.
    for (field, value) in [
        ("sandbox", json!({"sandbox_id": alice_sandbox})),
        ("thread_data", alice_data.clone()),
    ] {
        let (code, e) = s
            .with_key(BOB)
            .post(
                "/api/threads/b1/state",
                json!({"values": {field: value, "title": "mine"}}),
            )
            .await;
        assert_eq!(code, 422, "{field}: {e}");
        assert_eq!(
            e,
            json!({"detail": format!("values.{field} is set by the server and cannot be written by clients")})
        );
    }
    // Nor may a run's input.
    for (field, value) in [
        ("sandbox", json!({"sandbox_id": alice_sandbox})),
        ("thread_data", alice_data.clone()),
    ] {
        let mut input = say("read her files");
        input[field] = value;
        for route in ["runs/wait", "runs/stream", "runs"] {
            let (code, e) = s
                .with_key(BOB)
                .post(&format!("/api/threads/b1/{route}"), json!({"input": input}))
                .await;
            assert_eq!(code, 422, "{route} {field}: {e}");
            assert_eq!(
                e,
                json!({"detail": format!("input.{field} is set by the server and cannot be written by clients")})
            );
        }
    }
    let (code, e) = s
        .with_key(BOB)
        .post(
            "/api/runs/wait",
            json!({"input": {"messages": [], "sandbox": {"sandbox_id": alice_sandbox}}}),
        )
        .await;
    assert_eq!(code, 422, "{e}");
    // Nothing of it reached Bob's thread, and no run was admitted.
    let (_, st) = s.with_key(BOB).get("/api/threads/b1/state").await;
    assert_eq!(st["values"]["sandbox"], Value::Null, "{st}");
    assert_eq!(st["values"]["thread_data"], Value::Null, "{st}");
    assert_eq!(st["values"]["title"], Value::Null, "{st}");
    let (_, runs) = s.with_key(BOB).get("/api/threads/b1/runs").await;
    assert_eq!(runs, json!([]));
}

/// The depth test: a checkpoint that holds Alice's sandbox and folders anyway (legacy or
/// corrupted, written past the HTTP checks) is not trusted — Bob's tools work in the sandbox
/// derived from (bob, b1).
#[tokio::test]
async fn a_forged_checkpoint_does_not_reach_another_users_sandbox() {
    let s = keyed_with_files().await;
    let (alice_sandbox, alice_data) = alice_saves_a_secret(&s).await;
    let home = s.home.path().to_owned();
    let alice_ws = home.join("users/alice/threads/a1/user-data/workspace");
    let bob_ws = home.join("users/bob/threads/b1/user-data/workspace");

    let store = &s.state.app.store;
    let head = store.latest_checkpoint("b1").await.unwrap().unwrap();
    let mut forged = head.state.clone();
    forged.sandbox = Some(antler_protocol::SandboxState {
        sandbox_id: Some(alice_sandbox.clone()),
    });
    forged.thread_data = Some(serde_json::from_value(alice_data.clone()).unwrap());
    store
        .put_checkpoint(antler_runtime::CheckpointWrite {
            meta: antler_runtime::CheckpointMeta {
                thread_id: "b1".into(),
                checkpoint_id: uuid::Uuid::now_v7().to_string(),
                parent_id: Some(head.meta.checkpoint_id.clone()),
                step: head.meta.step + 1,
                created_at: antler_runtime::now_rfc3339(),
                metadata: json!({"source": "update", "step": head.meta.step + 1}),
            },
            changes: Vec::new(),
            fields: Some(forged.fields_value()),
        })
        .await
        .unwrap();
    let (_, st) = s.with_key(BOB).get("/api/threads/b1/state").await;
    assert_eq!(st["values"]["sandbox"]["sandbox_id"], json!(alice_sandbox));

    let (code, done) = s
        .with_key(BOB)
        .wait_run("b1", json!({"input": say("read her files")}))
        .await;
    assert_eq!(code, 200, "{done}");
    let read = tool_text(&done, "bob-r");
    assert!(!read.contains(SECRET), "Bob read Alice's file: {read}");
    assert!(read.starts_with("Error:"), "{read}");
    assert!(
        !alice_ws.join("x").exists(),
        "Bob's write landed in Alice's workspace"
    );
    assert_eq!(
        std::fs::read_to_string(bob_ws.join("x")).unwrap(),
        "from bob"
    );
    assert_eq!(
        std::fs::read_to_string(alice_ws.join("secret.txt")).unwrap(),
        SECRET
    );
    // The informational thread folders are Bob's again after the run.
    let ws = done["thread_data"]["workspace_path"].as_str().unwrap();
    assert!(
        ws.ends_with("users/bob/threads/b1/user-data/workspace"),
        "{ws}"
    );
}

/// A named user's custom agents (`users/{id}/agents/{name}/`) are looked up for the
/// authenticated user only: their owner can run them, nobody else can reach them by
/// `assistant_id` or by `context.agent_name`.
#[tokio::test]
async fn per_user_agents_belong_to_their_owner() {
    let s = keyed().await;
    s.model.push(ScriptedReply::text("as scribe"));
    let dir = s.home.path().join("users/bob/agents/scribe");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), "name: scribe\n").unwrap();
    alice_and_bob_threads(&s).await;
    let status_of_last = |thread: &'static str, key: &'static str| {
        let s = &s;
        async move {
            let (_, runs) = s
                .with_key(key)
                .get(&format!("/api/threads/{thread}/runs"))
                .await;
            runs[0]["status"].as_str().unwrap().to_owned()
        }
    };
    // Bob runs his own agent.
    let (code, e) = s
        .with_key(BOB)
        .wait_run("b1", json!({"input": say("hi"), "assistant_id": "scribe"}))
        .await;
    assert_eq!(code, 200, "{e}");
    assert_eq!(status_of_last("b1", BOB).await, "success");
    // Alice cannot name it as an assistant…
    let (code, _) = s
        .with_key(ALICE)
        .wait_run("a1", json!({"input": say("hi"), "assistant_id": "scribe"}))
        .await;
    assert_eq!(code, 404);
    // …nor load it through the run context.
    let (code, _) = s
        .with_key(ALICE)
        .wait_run(
            "a1",
            json!({"input": say("hi"), "context": {"agent_name": "scribe"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(status_of_last("a1", ALICE).await, "error");
}

const CANARY: &str = "CANARY-CONTENT-51c9";

/// Every file and its content under `dir` (symlinks not followed).
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Option<String>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.push((e.path(), None));
            } else {
                out.push((e.path(), std::fs::read_to_string(e.path()).ok()));
            }
        }
    }
    out.sort();
    out
}

async fn raw_get(s: &TestServer, path: &str) -> (u16, String) {
    let r = s.client.get(s.url(path)).send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.text().await.unwrap())
}

fn leaks(text: &str) -> bool {
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    text.contains(CANARY)
        || text.contains("secret.txt")
        || text.contains(comm.trim())
        || text.contains("cmdline")
}

/// Confined bash may replace a thread folder with a symlink; the upload, listing, deletion and
/// artifact routes must refuse the swapped folder instead of following it.
#[tokio::test]
async fn swapped_thread_folders_are_never_followed() {
    for name in ["workspace", "uploads", "outputs", ""] {
        for proc_target in [false, true] {
            let s = TestServer::start(vec![]).await;
            s.thread("t1").await;
            let (code, up) = upload(&s, "t1", &[("own.txt", b"own")]).await;
            assert_eq!(code, 200, "{up}");
            let ud = s.home.path().join("threads/t1/user-data");
            for d in ["workspace", "uploads", "outputs"] {
                std::fs::create_dir_all(ud.join(d)).unwrap();
            }
            let canary = tempfile::tempdir().unwrap();
            std::fs::write(canary.path().join("secret.txt"), CANARY).unwrap();
            for d in ["workspace", "uploads", "outputs"] {
                std::fs::create_dir_all(canary.path().join(d)).unwrap();
                std::fs::write(canary.path().join(d).join("secret.txt"), CANARY).unwrap();
            }
            let before = snapshot(canary.path());
            let target = if proc_target {
                std::path::PathBuf::from("/proc/self")
            } else {
                canary.path().to_path_buf()
            };
            let victim = if name.is_empty() {
                ud.clone()
            } else {
                ud.join(name)
            };
            std::fs::remove_dir_all(&victim).unwrap();
            std::os::unix::fs::symlink(&target, &victim).unwrap();
            let ctx = format!("{name:?} -> {}", target.display());
            let file = if proc_target { "comm" } else { "secret.txt" };
            let virt = if name.is_empty() {
                "mnt/user-data".to_owned()
            } else {
                format!("mnt/user-data/{name}")
            };
            let uploads_swapped = name == "uploads" || name.is_empty();

            // Artifact download of the swapped folder's file.
            let (code, body) =
                raw_get(&s, &format!("/api/threads/t1/artifacts/{virt}/{file}")).await;
            assert!((400..500).contains(&code), "{ctx}: artifact {code} {body}");
            assert!(!leaks(&body), "{ctx}: artifact leaked {body}");
            if !name.is_empty() {
                // Also through the aggregate spelling of a nested file.
                let (code, body) = raw_get(
                    &s,
                    &format!("/api/threads/t1/artifacts/{virt}/uploads/{file}"),
                )
                .await;
                assert!(
                    (400..500).contains(&code),
                    "{ctx}: nested artifact {code} {body}"
                );
                assert!(!leaks(&body), "{ctx}: nested artifact leaked {body}");
            }

            // Upload listing.
            let (code, body) = raw_get(&s, "/api/threads/t1/uploads/list").await;
            assert!(!leaks(&body), "{ctx}: list leaked {body}");
            if uploads_swapped {
                assert!((400..500).contains(&code), "{ctx}: list {code} {body}");
                assert!(body.contains("not a directory"), "{ctx}: {body}");
            } else {
                assert_eq!(code, 200, "{ctx}: {body}");
            }

            // Upload into the thread.
            let (code, up) =
                upload(&s, "t1", &[("secret.txt", b"pwned"), ("x.txt", b"pwned")]).await;
            if uploads_swapped {
                assert!((400..500).contains(&code), "{ctx}: upload {code} {up}");
                assert!(
                    up["detail"].as_str().unwrap().contains("not a directory"),
                    "{ctx}: {up}"
                );
            } else {
                assert_eq!(code, 200, "{ctx}: {up}");
            }

            // Deleting an upload by the canary's name (only the real uploads folder has one).
            let (code, d) = s.delete(&format!("/api/threads/t1/uploads/{file}")).await;
            if uploads_swapped {
                assert!((400..500).contains(&code), "{ctx}: delete {code} {d}");
            }

            assert_eq!(
                snapshot(canary.path()),
                before,
                "{ctx}: the canary was touched"
            );
        }
    }
}

#[tokio::test]
async fn artifact_symlinks_inside_the_tree() {
    let s = TestServer::start(vec![]).await;
    s.thread("t1").await;
    let ud = s.home.path().join("threads/t1/user-data");
    for d in ["workspace", "uploads", "outputs"] {
        std::fs::create_dir_all(ud.join(d)).unwrap();
    }
    let canary = tempfile::tempdir().unwrap();
    std::fs::write(canary.path().join("secret.txt"), CANARY).unwrap();
    std::os::unix::fs::symlink(canary.path(), ud.join("workspace/evil")).unwrap();
    std::os::unix::fs::symlink("/proc/self", ud.join("workspace/proc")).unwrap();
    std::fs::write(ud.join("outputs/report.md"), "# Report").unwrap();
    std::os::unix::fs::symlink("../outputs/report.md", ud.join("workspace/link.md")).unwrap();
    for (path, want) in [
        ("workspace/evil/secret.txt", 403),
        ("workspace/proc/comm", 403),
        ("workspace/link.md", 200),
    ] {
        let (code, body) = raw_get(
            &s,
            &format!("/api/threads/t1/artifacts/mnt/user-data/{path}"),
        )
        .await;
        assert_eq!(code, want, "{path}: {body}");
        assert!(!leaks(&body), "{path}: {body}");
    }
    let (_, body) = raw_get(
        &s,
        "/api/threads/t1/artifacts/mnt/user-data/workspace/link.md",
    )
    .await;
    assert_eq!(body, "# Report");
}

/// With keys for two users, one of them must not start programs on the host for everyone: the
/// host-wide MCP config is not writable over the API (a stdio `command` runs unconfined).
#[tokio::test]
async fn with_several_users_the_mcp_config_is_not_writable_over_the_api() {
    let s = keyed().await;
    let evil = json!({"mcp_servers": {"x": {"command": "sh", "args": ["-c", "cat /etc/passwd"]}}});
    let (status, body) = s.with_key(BOB).put("/api/mcp/config", evil).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("host-wide"),
        "{body}"
    );
    let toggle = json!({"server_name": "x", "enabled": true});
    let (status, _) = s.with_key(ALICE).patch("/api/mcp/config", toggle).await;
    assert_eq!(status, 403);
    let (status, _) = s
        .with_key(BOB)
        .send("POST", "/api/mcp/cache/reset", None)
        .await;
    assert_eq!(status, 403);
    // Reading stays open (secrets masked) and shows nothing was written.
    let (status, body) = s.with_key(BOB).get("/api/mcp/config").await;
    assert_eq!(status, 200, "{body}");
    assert!(body["mcp_servers"].get("x").is_none(), "{body}");
}
