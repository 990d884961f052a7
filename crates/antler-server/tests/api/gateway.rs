//! DeerFlow gateway routes (spec 70 §3.4): catalogues, uploads, artifacts, the message feed,
//! token usage, memory, assistants, and JSON 404/405s.

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::*;

pub fn multipart(files: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "XantlerBOUNDARYx";
    let mut body = Vec::new();
    for (name, data) in files {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub async fn upload(s: &TestServer, thread: &str, files: &[(&str, &[u8])]) -> (u16, Value) {
    let (ct, body) = multipart(files);
    let r = s
        .client
        .post(s.url(&format!("/api/threads/{thread}/uploads")))
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    json_of(r).await
}

#[tokio::test]
async fn catalogues_and_probes() {
    let s = TestServer::start(vec![]).await;
    let (code, h) = s.get("/health").await;
    assert_eq!(
        (code, h),
        (200, json!({"status": "healthy", "service": "antler"}))
    );
    let (code, m) = s.get("/api/models").await;
    assert_eq!(code, 200);
    assert_eq!(m["models"][0]["name"], "main");
    assert_eq!(m["models"][0]["display_name"], "Main");
    assert_eq!(m["models"][1]["supports_thinking"], true);
    assert_eq!(m["token_usage"]["enabled"], true);
    let text = m.to_string();
    assert!(
        !text.contains("sk-secret") && !text.contains("127.0.0.1:9"),
        "{text}"
    );
    let (_, alias) = s.get("/api/langgraph/models").await;
    assert_eq!(alias, m);
    let (code, one) = s.get("/api/models/thinker").await;
    assert_eq!((code, one["model"].as_str()), (200, Some("scripted-2")));
    let (code, _) = s.get("/api/models/nope").await;
    assert_eq!(code, 404);
    let (_, f) = s.get("/api/features").await;
    assert_eq!(
        f,
        json!({"agents_api": {"enabled": false}, "browser_control": {"enabled": false}, "mcp_tasks": {"enabled": false}})
    );
    let (code, sk) = s.get("/api/skills").await;
    assert_eq!(code, 200);
    assert!(sk["skills"].is_array());
    let (_, sc) = s.get("/api/suggestions/config").await;
    assert_eq!(sc, json!({"enabled": false, "max_suggestions": 3}));
    let (_, me) = s.get("/api/v1/auth/me").await;
    assert_eq!(
        me,
        json!({"id": "default", "email": "default@test.local", "system_role": "admin", "needs_setup": false, "oauth_provider": null})
    );
    let (_, st) = s.get("/api/v1/auth/setup-status").await;
    assert_eq!(
        st,
        json!({"needs_setup": false, "registration_enabled": false})
    );
    let (code, lim) = s.get("/api/threads/not-created-yet/uploads/limits").await;
    assert_eq!(code, 200);
    assert_eq!(
        lim,
        json!({"max_files": 10, "max_file_size": 52428800u64, "max_total_size": 104857600u64})
    );
    let (code, e) = s.get("/api/nothing/here").await;
    assert_eq!((code, e), (404, json!({"detail": "Not Found"})));
    let (code, e) = s.get("/api/threads/search").await;
    assert_eq!(code, 405);
    assert!(e["detail"].is_string());
    let (code, a) = s.post("/api/assistants/search", json!({})).await;
    assert_eq!(code, 200);
    assert_eq!(a[0]["assistant_id"], "lead_agent");
    assert_eq!(a[0]["graph_id"], "lead_agent");
    assert_eq!(a[0]["metadata"], json!({"created_by": "system"}));
    let (code, _) = s.get("/api/assistants/lead_agent").await;
    assert_eq!(code, 200);
    let (code, g) = s.get("/api/assistants/lead_agent/graph").await;
    assert_eq!((code, g["nodes"].clone()), (200, json!([])));
    let (code, _) = s.get("/api/assistants/ghost").await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn custom_agents_are_assistants() {
    let s = TestServer::start(vec![ScriptedReply::text("as writer")]).await;
    let dir = s.home.path().join("agents/Writer_Bot");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        "name: Writer_Bot\ndescription: Writes things\n",
    )
    .unwrap();
    let (_, a) = s
        .post("/api/assistants/search", json!({"name": "writer"}))
        .await;
    assert_eq!(a.as_array().unwrap().len(), 1);
    assert_eq!(a[0]["assistant_id"], "Writer_Bot");
    assert_eq!(a[0]["description"], "Writes things");
    assert_eq!(a[0]["metadata"]["created_by"], "user");
    s.thread("t1").await;
    let (h, _) = s
        .stream_run(
            "t1",
            json!({"input": say("x"), "assistant_id": "Writer_Bot"}),
        )
        .await;
    let (_, run) = ids_from_location(&h);
    let r = run_status(&s, "t1", &run).await;
    assert_eq!(r["assistant_id"], "Writer_Bot");
    assert_eq!(r["kwargs"]["context"]["agent_name"], "writer-bot");
}

#[tokio::test]
async fn uploads_are_sanitised_deduplicated_and_served() {
    let s = TestServer::start(vec![]).await;
    // Before the thread exists (the UI uploads first).
    let (code, up) = upload(
        &s,
        "t1",
        &[
            ("notes.txt", b"hello"),
            ("notes.txt", b"second"),
            ("../../etc/passwd", b"root:x"),
            ("..", b"nope"),
            ("evil\\name.txt", b"nope"),
            ("page.html", b"<script>alert(1)</script>"),
        ],
    )
    .await;
    assert_eq!(code, 200, "{up}");
    assert_eq!(up["success"], false);
    assert_eq!(up["skipped_files"], json!(["..", "evil\\name.txt"]));
    assert_eq!(
        up["message"],
        "Successfully uploaded 4 file(s); skipped 2 unsafe file(s)"
    );
    let names: Vec<&str> = strs(&up["files"], "filename");
    assert_eq!(names, ["notes.txt", "notes_1.txt", "passwd", "page.html"]);
    let f0 = &up["files"][0];
    assert_eq!(f0["size"], 5);
    assert_eq!(f0["virtual_path"], "/mnt/user-data/uploads/notes.txt");
    assert_eq!(
        f0["artifact_url"],
        "/api/threads/t1/artifacts/mnt/user-data/uploads/notes.txt"
    );
    assert_eq!(f0["extension"], ".txt");
    assert_eq!(up["files"][1]["original_filename"], "notes.txt");
    let uploads = s.home.path().join("threads/t1/user-data/uploads");
    assert_eq!(
        std::fs::read_to_string(uploads.join("passwd")).unwrap(),
        "root:x"
    );
    assert!(!s.home.path().join("etc").exists());
    let staged: Vec<String> = std::fs::read_dir(&uploads)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".upload-"))
        .collect();
    assert!(staged.is_empty(), "{staged:?}");

    // Served back through the artifact URL; ranges honoured; HTML only as a download.
    let r = s
        .raw("GET", f0["artifact_url"].as_str().unwrap(), &[])
        .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain");
    assert_eq!(
        r.headers()["content-disposition"],
        "inline; filename*=UTF-8''notes.txt"
    );
    assert_eq!(r.text().await.unwrap(), "hello");
    let r = s
        .raw(
            "GET",
            "/api/threads/t1/artifacts/mnt/user-data/uploads/notes_1.txt?download=true",
            &[("range", "bytes=1-3")],
        )
        .await;
    assert_eq!(r.status().as_u16(), 206);
    assert!(r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment;"));
    assert_eq!(r.text().await.unwrap(), "eco");
    let r = s
        .raw(
            "GET",
            "/api/threads/t1/artifacts/mnt/user-data/uploads/page.html",
            &[],
        )
        .await;
    assert!(r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment;"));
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let (code, e) = s
        .get("/api/threads/t1/artifacts/mnt/user-data/uploads/missing.txt")
        .await;
    assert_eq!(code, 404);
    assert!(e["detail"].is_string());
    let (code, _) = s
        .get("/api/threads/t1/artifacts/mnt/user-data/uploads")
        .await;
    assert_eq!(code, 400, "a directory");
    let (code, _) = s.get("/api/threads/t1/artifacts/etc/passwd").await;
    assert_eq!(code, 400);

    // List and delete.
    s.thread("t1").await;
    let (code, list) = s.get("/api/threads/t1/uploads/list").await;
    assert_eq!(code, 200);
    assert_eq!(list["count"], 4);
    let (code, d) = s.delete("/api/threads/t1/uploads/notes_1.txt").await;
    assert_eq!(
        (code, d),
        (
            200,
            json!({"success": true, "message": "Deleted notes_1.txt"})
        )
    );
    let (code, _) = s.delete("/api/threads/t1/uploads/notes_1.txt").await;
    assert_eq!(code, 404);
    let (code, _) = s.delete("/api/threads/t1/uploads/..").await;
    assert!(code == 400 || code == 404, "{code}");
}

#[tokio::test]
async fn upload_limits_are_413_and_leave_nothing_behind() {
    let s = TestServer::start_with(
        vec![],
        Options {
            yaml_uploads: Some((2, 10, 15)),
            ..Options::default()
        },
    )
    .await;
    let (code, e) = upload(&s, "t1", &[("a", b"1"), ("b", b"2"), ("c", b"3")]).await;
    assert_eq!(code, 413);
    assert_eq!(e["detail"], "Too many files: maximum is 2");
    let (code, e) = upload(&s, "t1", &[("big.bin", &[7u8; 11])]).await;
    assert_eq!(code, 413);
    assert_eq!(e["detail"], "File too large: big.bin");
    let (code, e) = upload(&s, "t1", &[("a", &[1u8; 8]), ("b", &[2u8; 8])]).await;
    assert_eq!(code, 413);
    assert_eq!(e["detail"], "Total upload size too large");
    let uploads = s.home.path().join("threads/t1/user-data/uploads");
    assert_eq!(
        std::fs::read_dir(&uploads).unwrap().count(),
        0,
        "nothing half-written"
    );
    // A body far over the limit is refused before it is read.
    let (code, e) = upload(&s, "t1", &[("huge", &vec![0u8; 3 * 1024 * 1024])]).await;
    assert_eq!(code, 413, "{e}");
    let (code, e) = upload(&s, "t1", &[]).await;
    assert_eq!(
        (code, e["detail"].as_str()),
        (400, Some("No files provided"))
    );
    let r = s
        .post_req("/api/threads/t1/uploads", json!({"files": []}))
        .await;
    assert_eq!(r.status().as_u16(), 400);
}

#[tokio::test]
async fn artifact_traversal_and_symlink_escapes_are_refused() {
    use tower::ServiceExt;
    let s = TestServer::start(vec![]).await;
    s.thread("t1").await;
    let ud = s.home.path().join("threads/t1/user-data");
    std::fs::create_dir_all(ud.join("outputs")).unwrap();
    std::fs::write(s.home.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(
        s.home.path().join("secret.txt"),
        ud.join("outputs/link.txt"),
    )
    .unwrap();
    std::fs::write(ud.join("outputs/report.md"), "# Report").unwrap();
    let router = s.state.router();
    let get = |uri: &str| {
        axum::http::Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .unwrap()
    };
    for uri in [
        "/api/threads/t1/artifacts/mnt/user-data/outputs/../../../../secret.txt",
        "/api/threads/t1/artifacts/mnt/user-data/outputs/%2E%2E/%2E%2E/%2E%2E/%2E%2E/secret.txt",
        "/api/threads/t1/artifacts/mnt/user-data/outputs/..%2F..%2F..%2F..%2Fsecret.txt",
        "/api/threads/t1/artifacts/mnt/user-data/outputs/link.txt",
    ] {
        let resp = router.clone().oneshot(get(uri)).await.unwrap();
        assert_eq!(resp.status().as_u16(), 403, "{uri}");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["detail"].is_string());
    }
    let resp = router
        .clone()
        .oneshot(get(
            "/api/threads/t1/artifacts/mnt/user-data/outputs/report.md",
        ))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/markdown"));
}

#[tokio::test]
async fn the_message_feed_pages_backwards_strictly() {
    let replies = (0..3)
        .map(|i| ScriptedReply::text(format!("answer {i}")))
        .collect();
    let s = TestServer::start(replies).await;
    s.thread("t1").await;
    for i in 0..3 {
        s.stream_run("t1", json!({"input": say(&format!("question {i}"))}))
            .await;
    }
    let (code, all) = s.get("/api/threads/t1/messages/page").await;
    assert_eq!(code, 200);
    let seqs: Vec<i64> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        (all["has_more"].clone(), all["next_before_seq"].clone()),
        (json!(false), Value::Null)
    );
    let row = &all["data"][0];
    assert_eq!(row["thread_id"], "t1");
    assert_eq!(row["category"], "message");
    assert_eq!(row["event_type"], "llm.human.input");
    assert_eq!(row["metadata"], json!({"caller": "lead_agent"}));
    assert_eq!(row["feedback"], Value::Null);
    assert!(row["run_id"].is_string());
    assert!(all["data"][1]["content"]["additional_kwargs"]["turn_duration"].is_i64());
    let (_, p1) = s.get("/api/threads/t1/messages/page?limit=4").await;
    let seqs: Vec<i64> = p1["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4, 5, 6]);
    assert_eq!(
        (p1["has_more"].clone(), p1["next_before_seq"].clone()),
        (json!(true), json!(3))
    );
    let (_, p2) = s
        .get("/api/threads/t1/messages/page?limit=4&before_seq=3")
        .await;
    let seqs: Vec<i64> = p2["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(
        (p2["has_more"].clone(), p2["next_before_seq"].clone()),
        (json!(false), Value::Null)
    );
    let (code, _) = s.get("/api/threads/t1/messages/page?after_seq=1").await;
    assert_eq!(code, 422);
    let (code, _) = s.get("/api/threads/t1/messages/page?limit=500").await;
    assert_eq!(code, 422);
    let (code, empty) = s.get("/api/threads/unknown/messages/page").await;
    assert_eq!((code, empty["data"].clone()), (200, json!([])));
    let (code, tu) = s.get("/api/threads/t1/token-usage").await;
    assert_eq!(code, 200);
    assert_eq!(tu["total_runs"], 3);
    assert_eq!(tu["by_model"]["main"]["runs"], 3);
}

#[tokio::test]
async fn memory_routes_read_and_change_the_long_term_memory() {
    let s = TestServer::start(vec![]).await;
    let (code, m) = s.get("/api/memory").await;
    assert_eq!(code, 200);
    assert_eq!(m["facts"], json!([]));
    assert_eq!(m["version"], "1.0");
    let (code, m) = s
        .post(
            "/api/memory/facts",
            json!({"content": "likes tea", "category": "preference", "confidence": 0.9}),
        )
        .await;
    assert_eq!(code, 200, "{m}");
    let facts = m["facts"].as_array().unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0]["content"], "likes tea");
    let id = facts[0]["id"].as_str().unwrap().to_owned();
    // The same content again is a conflict; empty content is invalid.
    let (code, _) = s
        .post("/api/memory/facts", json!({"content": "Likes tea"}))
        .await;
    assert_eq!(code, 409);
    let (code, _) = s.post("/api/memory/facts", json!({"content": ""})).await;
    assert_eq!(code, 422);
    let (code, c) = s.get("/api/memory/config").await;
    assert_eq!(code, 200);
    assert_eq!(c["enabled"], true);
    let (code, m) = s.delete(&format!("/api/memory/facts/{id}")).await;
    assert_eq!((code, m["facts"].clone()), (200, json!([])));
    let (code, _) = s.delete("/api/memory/facts/f1").await;
    assert_eq!(code, 404);
}

/// A gateway body field of the wrong type is a 422 whose string `detail` names the field.
#[tokio::test]
async fn typed_gateway_bodies_name_the_bad_field() {
    let s = TestServer::start(vec![]).await;
    s.assert_bad_bodies(&[
        (
            "POST",
            "/api/assistants/search",
            json!({"limit": "all"}),
            422,
            "'limit'",
        ),
        (
            "POST",
            "/api/memory/facts",
            json!({"content": "x", "confidence": "high"}),
            422,
            "'confidence'",
        ),
        (
            "POST",
            "/api/memory/facts",
            json!({"category": "x"}),
            422,
            "content",
        ),
        (
            "PATCH",
            "/api/memory/facts/f1",
            json!({"content": 3}),
            422,
            "'content'",
        ),
    ])
    .await;
}
