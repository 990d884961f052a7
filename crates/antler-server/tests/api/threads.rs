//! Threads, state and history (spec 70 §3.2).

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::*;

#[tokio::test]
async fn create_is_idempotent_and_validates_ids() {
    let s = TestServer::start(vec![]).await;
    let (code, t) = s
        .post(
            "/api/threads",
            json!({"thread_id": "3f2a9c1e-5b7d", "metadata": {"agent_name": "x", "user_id": "evil", "owner_id": "evil"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(t["thread_id"], "3f2a9c1e-5b7d");
    assert_eq!(t["status"], "idle");
    assert_eq!(t["values"], json!({}));
    assert_eq!(t["interrupts"], json!({}));
    assert_eq!(t["metadata"], json!({"agent_name": "x"}));
    assert!(t["created_at"].as_str().unwrap().ends_with("+00:00"));
    // Same id again: the existing thread; with if_exists=raise: 409.
    let (code, again) = s
        .post(
            "/api/threads",
            json!({"thread_id": "3f2a9c1e-5b7d", "metadata": {}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(again["created_at"], t["created_at"]);
    let (code, e) = s
        .post(
            "/api/threads",
            json!({"thread_id": "3f2a9c1e-5b7d", "if_exists": "raise"}),
        )
        .await;
    assert_eq!(code, 409);
    assert!(e["detail"].is_string());
    // Generated ids are UUIDv4.
    let (code, g) = s.post("/api/threads", json!({})).await;
    assert_eq!(code, 200);
    let id = g["thread_id"].as_str().unwrap();
    assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 4);
    // The alias answers identically; an empty body is `{}` (Python SDK).
    let r = s.raw("POST", "/api/langgraph/threads", &[]).await;
    assert_eq!(r.status().as_u16(), 200);
    for bad in ["a b", "../x", &"x".repeat(65)] {
        let (code, e) = s.post("/api/threads", json!({"thread_id": bad})).await;
        assert_eq!(code, 422, "{bad}");
        assert!(e["detail"].is_string());
    }
    let (code, _) = s
        .post("/api/threads", json!({"supersteps": [{"updates": []}]}))
        .await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn state_and_history_work_before_the_first_run() {
    let s = TestServer::start(vec![]).await;
    s.thread("t1").await;
    let (code, st) = s.get("/api/threads/t1/state").await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["next"], json!([]));
    assert_eq!(st["tasks"], json!([]));
    assert_eq!(st["interrupts"], json!([]));
    assert_eq!(st["metadata"]["step"], -1);
    assert_eq!(st["checkpoint"]["checkpoint_ns"], "");
    assert_eq!(st["checkpoint"]["thread_id"], "t1");
    assert_eq!(st["checkpoint"]["id"], st["checkpoint_id"]);
    assert!(st["checkpoint"]["ts"].is_string());
    assert_eq!(st["checkpoint"]["checkpoint_map"], Value::Null);
    assert_eq!(st["parent_checkpoint"], Value::Null);
    assert_eq!(st["values"]["messages"], json!([]));
    let (code, h) = s.post("/api/threads/t1/history", json!({"limit": 1})).await;
    assert_eq!(code, 200);
    assert_eq!(h.as_array().unwrap().len(), 1);
    // Unknown thread: empty history, 404 state.
    let (code, h) = s.post("/api/threads/nope/history", json!({})).await;
    assert_eq!((code, h), (200, json!([])));
    let (code, e) = s.get("/api/threads/nope/state").await;
    assert_eq!(code, 404);
    assert_eq!(e["detail"], "Thread nope not found");
}

#[tokio::test]
async fn rename_through_state_update_replaces_channels() {
    let s = TestServer::start(vec![ScriptedReply::text("hello there")]).await;
    s.thread("t1").await;
    s.stream_run("t1", json!({"input": say("hi")})).await;
    let (code, st) = s
        .post(
            "/api/threads/t1/state",
            json!({"values": {"title": "New name"}}),
        )
        .await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["values"]["title"], "New name");
    assert_eq!(st["metadata"]["source"], "update");
    assert_eq!(kinds(&st["values"]["messages"]), ["human", "ai"]);
    let (_, list) = s.post("/api/threads/search", json!({})).await;
    assert_eq!(list[0]["values"], json!({"title": "New name"}));
    // messages are replaced, not merged.
    let (code, st) = s
        .post(
            "/api/threads/t1/state",
            json!({"values": {"messages": [{"type": "human", "content": "only me", "id": "m1"}]}, "as_node": "editor"}),
        )
        .await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["values"]["messages"].as_array().unwrap().len(), 1);
    assert_eq!(st["values"]["messages"][0]["id"], "m1");
    let (_, now) = s.get("/api/threads/t1/state").await;
    assert_eq!(now["values"]["messages"].as_array().unwrap().len(), 1);
    assert_eq!(now["values"]["title"], "New name");
    // The next run continues from the edited state.
    s.model.push(ScriptedReply::text("again"));
    s.stream_run("t1", json!({"input": say("more")})).await;
    let (_, now) = s.get("/api/threads/t1/state").await;
    assert_eq!(kinds(&now["values"]["messages"]), ["human", "human", "ai"]);
    // Unknown channels and bad values are 422; a fork from an unknown checkpoint 404.
    let (code, e) = s
        .post("/api/threads/t1/state", json!({"values": {"bogus": 1}}))
        .await;
    assert_eq!(code, 422);
    assert_eq!(e["detail"], "Unknown thread-state field(s): bogus");
    let (code, _) = s
        .post(
            "/api/threads/t1/state",
            json!({"values": {"artifacts": "x"}}),
        )
        .await;
    assert_eq!(code, 422);
    let (code, _) = s
        .post(
            "/api/threads/t1/state",
            json!({"values": {"title": "x"}, "checkpoint_id": "nope"}),
        )
        .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn history_has_no_checkpoint_objects_and_stamps_runs() {
    let s = TestServer::start(ls_then("call_1", "list", "two folders")).await;
    s.thread("t1").await;
    let (h, _) = s.stream_run("t1", json!({"input": say("list")})).await;
    let (_, run_id) = ids_from_location(&h);
    let (code, hist) = s.post("/api/threads/t1/history", json!({"limit": 5})).await;
    assert_eq!(code, 200);
    let hist = hist.as_array().unwrap();
    assert_eq!(hist.len(), 5);
    for e in hist {
        let o = e.as_object().unwrap();
        assert!(!o.contains_key("checkpoint"), "{e}");
        assert!(!o.contains_key("parent_checkpoint"));
        assert!(!o.contains_key("tasks"));
        assert_eq!(e["next"], json!([]));
        assert!(e["metadata"].get("source").is_none());
        assert!(e["metadata"]["step"].is_i64());
    }
    let head = &hist[0];
    let msgs = visible(&head["values"]["messages"]);
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[0]["type"], "human");
    assert!(msgs[0].get("run_id").is_none());
    for m in &msgs[1..] {
        assert_eq!(m["run_id"], run_id.as_str(), "{m}");
    }
    assert!(msgs[1]["additional_kwargs"].get("turn_duration").is_none());
    assert!(msgs[3]["additional_kwargs"]["turn_duration"].is_i64());
    // Only the head carries messages; every entry its title/thread_data when set.
    assert!(hist[1]["values"].get("messages").is_none());
    assert!(head["values"]["thread_data"].is_object());
    assert!(head["values"].get("artifacts").is_some());
    // Paging with `before` in both forms.
    let second = hist[1]["checkpoint_id"].clone();
    let (_, older) = s
        .post(
            "/api/threads/t1/history",
            json!({"limit": 2, "before": hist[0]["checkpoint_id"]}),
        )
        .await;
    assert_eq!(older[0]["checkpoint_id"], second);
    assert!(
        older[0]["values"].get("messages").is_some(),
        "first returned entry"
    );
    let (_, older2) = s
        .post(
            "/api/threads/t1/history",
            json!({"limit": 2, "before": {"checkpoint_id": hist[0]["checkpoint_id"]}}),
        )
        .await;
    assert_eq!(older2[0]["checkpoint_id"], second);
    let (code, _) = s.post("/api/threads/t1/history", json!({"limit": 0})).await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn search_orders_pinned_first_and_filters() {
    let s = TestServer::start(vec![]).await;
    for id in ["a", "b", "c", "d"] {
        s.thread(id).await;
    }
    let (code, _) = s
        .patch(
            "/api/threads/b",
            json!({"metadata": {"deerflow_pinned": true}}),
        )
        .await;
    assert_eq!(code, 200);
    let (code, t) = s
        .patch(
            "/api/threads/c",
            json!({"metadata": {"deerflow_sidecar": true, "user_id": "x"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(t["metadata"], json!({"deerflow_sidecar": true}));
    assert_eq!(t["values"], json!({}));
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t["thread_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, all) = s.post("/api/threads/search", json!({"limit": 10})).await;
    assert_eq!(ids(&all)[0], "b", "pinned first");
    assert_eq!(ids(&all)[1], "c", "then most recently updated");
    let (_, side) = s
        .post(
            "/api/threads/search",
            json!({"metadata": {"deerflow_sidecar": true}}),
        )
        .await;
    assert_eq!(ids(&side), ["c"]);
    let (_, asc) = s
        .post(
            "/api/threads/search",
            json!({"sort_by": "thread_id", "sort_order": "asc", "ids": ["d", "a", "c"]}),
        )
        .await;
    assert_eq!(ids(&asc), ["a", "c", "d"]);
    let (_, page) = s
        .post(
            "/api/threads/search",
            json!({"sort_by": "thread_id", "sort_order": "asc", "limit": 2, "offset": 2}),
        )
        .await;
    assert_eq!(ids(&page), ["c", "d"], "order is b (pinned), a, c, d");
    let (_, idle) = s
        .post("/api/threads/search", json!({"status": "idle"}))
        .await;
    assert_eq!(idle.as_array().unwrap().len(), 4);
    let (code, _) = s.post("/api/threads/search", json!({"bogus": 1})).await;
    assert_eq!(code, 400);
    let (code, _) = s.post("/api/threads/search", json!({"limit": 0})).await;
    assert_eq!(code, 422);
    let (code, _) = s
        .post("/api/threads/search", json!({"status": "running"}))
        .await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn delete_removes_everything_and_twice_is_404() {
    let s = TestServer::start(vec![ScriptedReply::text("ok")]).await;
    s.thread("t1").await;
    s.stream_run("t1", json!({"input": say("hi")})).await;
    let dir = s.home.path().join("threads/t1/user-data");
    std::fs::create_dir_all(dir.join("outputs")).unwrap();
    std::fs::write(dir.join("outputs/x.txt"), "x").unwrap();
    let (code, body) = s.delete("/api/threads/t1").await;
    assert_eq!(code, 200);
    assert_eq!(
        body,
        json!({"success": true, "message": "Deleted local thread data for t1"})
    );
    assert!(!s.home.path().join("threads/t1").exists());
    let (code, _) = s.delete("/api/threads/t1").await;
    assert_eq!(code, 404);
    let (code, _) = s.get("/api/threads/t1").await;
    assert_eq!(code, 404);
    let (code, h) = s.post("/api/threads/t1/history", json!({})).await;
    assert_eq!((code, h), (200, json!([])));
}

#[tokio::test]
async fn get_returns_full_values() {
    let s = TestServer::start(vec![ScriptedReply::text("hello")]).await;
    s.thread("t1").await;
    s.stream_run("t1", json!({"input": say("hi")})).await;
    let (code, t) = s.get("/api/threads/t1").await;
    assert_eq!(code, 200);
    assert_eq!(t["status"], "idle");
    let msgs = visible(&t["values"]["messages"]);
    assert_eq!(msgs.len(), 2, "{t:#}");
    assert_eq!(msgs[0]["name"], "user-input");
    assert!(msgs[0]["additional_kwargs"]["run_id"].is_string());
    assert!(t["values"]["thread_data"].is_object());
}

/// A body field of the wrong type is a 422 whose string `detail` names the field.
#[tokio::test]
async fn typed_thread_bodies_name_the_bad_field() {
    let s = TestServer::start(vec![]).await;
    s.thread("t1").await;
    s.assert_bad_bodies(&[
        (
            "POST",
            "/api/threads",
            json!({"metadata": 5}),
            422,
            "'metadata'",
        ),
        (
            "PATCH",
            "/api/threads/t1",
            json!({"metadata": []}),
            422,
            "'metadata'",
        ),
        (
            "POST",
            "/api/threads/t1/state",
            json!({"as_node": 1}),
            422,
            "'as_node'",
        ),
        (
            "POST",
            "/api/threads/t1/history",
            json!({"limit": "ten"}),
            422,
            "'limit'",
        ),
        // Thread search keeps its 400 for a bad body, and names the field too.
        (
            "POST",
            "/api/threads/search",
            json!({"ids": "t1"}),
            400,
            "'ids'",
        ),
    ])
    .await;
    // Malformed JSON stays a 422.
    let (code, e) = s.post_raw("/api/threads", "{not json").await;
    assert_eq!(code, 422, "{e}");
    let detail = e["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("Malformed JSON body"), "{e}");
}
