//! Runs (spec 70 §3.3, §5): background/wait/stateless creation, get/list, cancel semantics,
//! multitask strategies, clarification, rollback, admission errors, restart reconciliation.

use std::sync::Arc;

use antler_runtime::Agent;
use antler_server::AgentHook;
use antler_store::RunStatus;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::*;

#[tokio::test]
async fn background_run_then_join_and_wait() {
    let s = TestServer::start(texts(&["bg answer", "waited"])).await;
    s.thread("t1").await;
    let r = s
        .post_req(
            "/api/threads/t1/runs",
            json!({"input": say("hi"), "metadata": {"tag": "x"}}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let (_, run_id) = ids_from_location(r.headers());
    let (_, run) = json_of(r).await;
    assert_eq!(run["run_id"], run_id.as_str());
    assert_eq!(run["status"], "pending");
    assert_eq!(run["metadata"], json!({"tag": "x"}));
    assert_eq!(run["multitask_strategy"], "reject");
    // R8 join: blocks, then the final values as JSON.
    let (code, values) = s.get(&format!("/api/threads/t1/runs/{run_id}/join")).await;
    assert_eq!(code, 200);
    assert_eq!(visible(&values["messages"])[1]["content"], "bg answer");
    let run = run_status(&s, "t1", &run_id).await;
    assert_eq!(run["status"], "success");
    assert_eq!(run["assistant_id"], "lead_agent");
    for k in [
        "total_input_tokens",
        "total_output_tokens",
        "total_tokens",
        "llm_call_count",
        "lead_agent_tokens",
        "subagent_tokens",
        "middleware_tokens",
        "message_count",
    ] {
        assert!(run[k].is_i64(), "{k}: {run}");
    }
    assert_eq!(run["llm_call_count"], 1);
    assert_eq!(run["kwargs"]["input"], say("hi"));
    // R3 wait.
    let r = s
        .post_req("/api/threads/t1/runs/wait", json!({"input": say("again")}))
        .await;
    let (_, waited_run) = ids_from_location(r.headers());
    assert_eq!(r.headers()["content-type"], "application/json");
    let (code, values) = json_of(r).await;
    assert_eq!(code, 200);
    assert_eq!(kinds(&values["messages"]), ["human", "ai", "human", "ai"]);
    assert!(values.get("__error__").is_none());
    // The waited values (answered from the run's final state) are the thread's state after it.
    let (code, thread_state) = s.get("/api/threads/t1/state").await;
    assert_eq!(code, 200);
    assert_eq!(values, thread_state["values"]);
    // R4: newest first.
    let (code, list) = s.get("/api/threads/t1/runs").await;
    assert_eq!(code, 200);
    assert_eq!(list[0]["run_id"], waited_run.as_str());
    assert_eq!(list[1]["run_id"], run_id.as_str());
    let (_, limited) = s.get("/api/threads/t1/runs?limit=1&status=success").await;
    assert_eq!(limited.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn failed_runs_report_error_events_and_error_values() {
    // Without the chain, a model failure fails the run (no error-handling middleware).
    let bare: AgentHook = Arc::new(|mut agent: Agent, _: &antler_runtime::RunOptions| {
        agent.chain = Arc::new(antler_runtime::Chain::empty());
        agent
    });
    let s = TestServer::start_with(
        vec![
            ScriptedReply::Error(antler_models::ModelError::InvalidRequest(
                "bad things".into(),
            )),
            ScriptedReply::Error(antler_models::ModelError::InvalidRequest("worse".into())),
        ],
        Options {
            hook: Some(bare),
            ..Options::default()
        },
    )
    .await;
    s.thread("t1").await;
    let (h, events) = s.stream_run("t1", json!({"input": say("x")})).await;
    let n = names(&events);
    assert_eq!(&n[n.len() - 2..], ["error", "end"]);
    let err = &events[events.len() - 2];
    assert_eq!(err.data["error"], "ModelError");
    assert_eq!(err.data["name"], "ModelError");
    assert!(err.data["message"].as_str().unwrap().contains("bad things"));
    assert!(err.id.is_some());
    let (_, run) = ids_from_location(&h);
    let r = run_status(&s, "t1", &run).await;
    assert_eq!(r["status"], "error");
    assert!(r["error"].as_str().unwrap().contains("bad things"));
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "error");
    let (code, values) = s.wait_run("t1", json!({"input": say("y")})).await;
    assert_eq!(code, 200);
    assert!(values["__error__"]["message"]
        .as_str()
        .unwrap()
        .contains("worse"));
}

#[tokio::test]
async fn stateless_runs_create_their_thread() {
    let s = TestServer::start(texts(&["a", "b"])).await;
    let r = s
        .post_req(
            "/api/langgraph/runs/stream",
            json!({"input": say("hi"), "assistant_id": "lead_agent"}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let (thread, _run) = ids_from_location(r.headers());
    let events = parse_sse(&r.text().await.unwrap());
    assert_eq!(events[0].data["thread_id"], thread.as_str());
    let (code, _) = s.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(code, 200, "kept, not deleted");
    let (code, values) = s
        .post(
            "/api/runs/wait",
            json!({"input": say("hi"), "config": {"configurable": {"thread_id": "chosen-1"}}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(visible(&values["messages"])[1]["content"], "b");
    let (code, _) = s.get("/api/threads/chosen-1").await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn admission_errors_are_4xx_and_create_no_run() {
    let s = TestServer::start(vec![]).await;
    let (code, e) = s
        .post("/api/threads/nope/runs/stream", json!({"input": say("x")}))
        .await;
    assert_eq!((code, e), (404, json!({"detail": "Thread nope not found"})));
    s.thread("t1").await;
    let (code, e) = s
        .post(
            "/api/threads/t1/runs/stream",
            json!({"assistant_id": "ghost"}),
        )
        .await;
    assert_eq!(
        (code, e["detail"].as_str()),
        (404, Some("Assistant ghost not found"))
    );
    let (code, e) = s
        .post(
            "/api/threads/t1/runs/stream",
            json!({"context": {"model_name": "gpt-9"}}),
        )
        .await;
    assert_eq!(code, 400);
    assert_eq!(
        e["detail"],
        "Model 'gpt-9' is not in the configured model allowlist"
    );
    let (code, e) = s
        .post(
            "/api/threads/t1/runs/stream",
            json!({"stream_mode": ["values", "events"]}),
        )
        .await;
    assert_eq!(
        (code, e["detail"].as_str()),
        (422, Some("Unsupported stream mode(s): events"))
    );
    let (code, e) = s
        .post(
            "/api/threads/t1/runs",
            json!({"input": {"messages": [{"role": "wizard", "content": "x"}]}}),
        )
        .await;
    assert_eq!(code, 400);
    assert!(e["detail"]
        .as_str()
        .unwrap()
        .starts_with("Invalid message at input.messages[0]"));
    let (code, _) = s
        .post(
            "/api/threads/t1/runs",
            json!({"checkpoint_id": "no-such-checkpoint"}),
        )
        .await;
    assert_eq!(code, 404);
    let (_, runs) = s.get("/api/threads/t1/runs").await;
    assert_eq!(runs, json!([]));
    // if_not_exists: create.
    s.model.push(ScriptedReply::text("made"));
    let (code, values) = s
        .wait_run(
            "fresh",
            json!({"input": say("x"), "if_not_exists": "create"}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(visible(&values["messages"])[1]["content"], "made");
}

#[tokio::test]
async fn recursion_limit_is_clamped_and_recorded() {
    let s = TestServer::start(texts(&["a", "b"])).await;
    s.thread("t1").await;
    let (h, _) = s
        .stream_run("t1", json!({"input": say("x"), "config": {"recursion_limit": 99999, "configurable": {"api_key": "sk-x"}}}))
        .await;
    let (_, run) = ids_from_location(&h);
    let r = run_status(&s, "t1", &run).await;
    assert_eq!(r["kwargs"]["context"]["recursion_limit"], 1000);
    assert_eq!(r["kwargs"]["config"]["configurable"]["api_key"], "***");
    let (h, _) = s
        .stream_run(
            "t1",
            json!({"input": say("x"), "config": {"recursion_limit": -5}}),
        )
        .await;
    let (_, run) = ids_from_location(&h);
    assert_eq!(
        run_status(&s, "t1", &run).await["kwargs"]["context"]["recursion_limit"],
        100
    );
}

#[tokio::test]
async fn cancel_is_202_then_idempotent_and_409_for_finished_runs() {
    let s = TestServer::gated(texts(&["slow", "done"])).await;
    s.thread("t1").await;
    let (run, mut reader) = start_detached(&s, "a").await;
    let url = s.url(&format!(
        "/api/threads/t1/runs/{run}/cancel?wait=0&action=interrupt"
    ));
    let resp = s.client.post(&url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    assert_eq!(resp.text().await.unwrap(), "");
    // The stream ends with `end` and no `error`.
    let rest = reader.rest().await;
    assert_eq!(names(&rest).last(), Some(&"end"));
    assert!(!names(&rest).contains(&"error"));
    assert_eq!(run_status(&s, "t1", &run).await["status"], "interrupted");
    let resp = s.client.post(&url).send().await.unwrap();
    assert_eq!(
        resp.status().as_u16(),
        202,
        "already interrupted: idempotent"
    );
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "interrupted");
    // A finished run is not cancellable.
    s.model.open(1);
    let (h, _) = s.stream_run("t1", json!({"input": say("b")})).await;
    let (_, done) = ids_from_location(&h);
    let resp = s
        .raw("POST", &format!("/api/threads/t1/runs/{done}/cancel"), &[])
        .await;
    assert_eq!(resp.status().as_u16(), 409);
    let (_, e) = json_of(resp).await;
    assert_eq!(
        e["detail"],
        format!("Run {done} is not cancellable (status: success)")
    );
    let (code, _) = s
        .post("/api/threads/t1/runs/nope/cancel", Value::Null)
        .await;
    assert_eq!(code, 404);
    let (code, _) = s
        .post(
            &format!("/api/threads/t1/runs/{run}/cancel?action=explode"),
            Value::Null,
        )
        .await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn cancel_with_wait_answers_204_after_the_run_stopped() {
    let s = TestServer::gated(vec![ScriptedReply::text("x")]).await;
    s.thread("t1").await;
    let r = s
        .post_req("/api/threads/t1/runs", json!({"input": say("a")}))
        .await;
    let (_, run) = ids_from_location(r.headers());
    while s.model.calls() == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(cancel_t1(&s, &run, "wait=1").await.status().as_u16(), 204);
    assert_eq!(run_status(&s, "t1", &run).await["status"], "interrupted");
}

#[tokio::test]
async fn rollback_restores_the_pre_run_state() {
    let s = TestServer::gated(vec![
        ScriptedReply::text("first answer"),
        ScriptedReply::tool_call(
            "c1",
            "ls",
            json!({"description": "d", "path": "/mnt/user-data/workspace"}),
        ),
        ScriptedReply::text("never"),
    ])
    .await;
    s.thread("t1").await;
    s.model.open(1);
    s.stream_run("t1", json!({"input": say("one")})).await;
    let (_, before) = s.get("/api/threads/t1/state").await;
    // The second run calls a tool, then blocks on its next model call.
    s.model.open(1);
    let (run, mut reader) = start_stream(
        &s,
        "t1",
        json!({"input": say("two"), "stream_mode": ["updates"], "on_disconnect": "continue"}),
    )
    .await;
    loop {
        let e = reader.next().await.unwrap();
        if e.event == "updates" && e.data.get("tools").is_some() {
            break;
        }
    }
    assert_eq!(
        cancel_t1(&s, &run, "wait=1&action=rollback")
            .await
            .status()
            .as_u16(),
        204
    );
    let r = run_status(&s, "t1", &run).await;
    assert_eq!(r["status"], "error");
    assert_eq!(r["error"], "Rolled back by user");
    let (_, after) = s.get("/api/threads/t1/state").await;
    assert_eq!(after["values"]["messages"], before["values"]["messages"]);
    assert_ne!(
        after["checkpoint_id"], before["checkpoint_id"],
        "a new head"
    );
    // The abandoned lineage stays in history.
    let (_, hist) = s
        .post("/api/threads/t1/history", json!({"limit": 100}))
        .await;
    assert!(hist.as_array().unwrap().len() > 5);
}

#[tokio::test]
async fn multitask_reject_interrupt_and_rollback() {
    let s = TestServer::gated(texts(&["a", "b", "c"])).await;
    s.thread("t1").await;
    let (first, mut first_stream) = start_detached(&s, "first").await;
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "busy");
    let (_, busy) = s
        .post("/api/threads/search", json!({"status": "busy"}))
        .await;
    assert_eq!(busy.as_array().unwrap().len(), 1);
    // reject (default): 409, no run created.
    let (code, e) = s
        .post(
            "/api/threads/t1/runs/stream",
            json!({"input": say("second")}),
        )
        .await;
    assert_eq!(code, 409);
    assert_eq!(e["detail"], "Thread t1 already has an active run");
    // Deleting or editing a busy thread is refused too.
    let (code, e) = s.delete("/api/threads/t1").await;
    assert_eq!(code, 409);
    assert_eq!(
        e["detail"],
        "Thread has work in flight. Delete it after the work finishes."
    );
    let (code, _) = s
        .post("/api/threads/t1/state", json!({"values": {"title": "x"}}))
        .await;
    assert_eq!(code, 409);
    // interrupt: the old run ends interrupted, the new one runs after it finalized.
    let r = s.stream_req("t1",
        json!({"input": say("third"), "multitask_strategy": "interrupt", "on_disconnect": "continue"}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let (_, third) = ids_from_location(r.headers());
    assert_eq!(names(&first_stream.rest().await).last(), Some(&"end"));
    assert_eq!(run_status(&s, "t1", &first).await["status"], "interrupted");
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "busy", "the new run holds the thread");
    s.model.open(1);
    let events = SseReader::new(r).rest().await;
    assert_eq!(names(&events).last(), Some(&"end"));
    assert_eq!(run_status(&s, "t1", &third).await["status"], "success");
    let (_, runs) = s.get("/api/threads/t1/runs").await;
    assert_eq!(runs.as_array().unwrap().len(), 2);
    // `enqueue` is supported now: see `enqueue_waits_for_the_active_run_then_runs`.
}

#[tokio::test]
async fn enqueue_waits_for_the_active_run_then_runs() {
    let s = TestServer::gated(texts(&["first answer", "second answer"])).await;
    s.thread("t1").await;
    let r = s
        .post_req("/api/threads/t1/runs", json!({"input": say("first")}))
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let (_, first) = ids_from_location(r.headers());
    // The first run is inside its model call (the gate is closed).
    while s.model.calls() < 1 {
        tokio::task::yield_now().await;
    }
    let r = s
        .post_req(
            "/api/threads/t1/runs",
            json!({"input": say("second"), "multitask_strategy": "enqueue"}),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200, "enqueue is accepted");
    let (_, second) = ids_from_location(r.headers());
    let (_, run) = json_of(r).await;
    assert_eq!(run["multitask_strategy"], "enqueue");
    let queued = run_status(&s, "t1", &second).await;
    assert_eq!(
        queued["status"], "pending",
        "the second run waits: {queued}"
    );
    assert_eq!(
        s.model.calls(),
        1,
        "the queued run has not called the model"
    );
    s.model.open(2);
    let (code, values) = s.get(&format!("/api/threads/t1/runs/{second}/join")).await;
    assert_eq!(code, 200);
    assert_eq!(run_status(&s, "t1", &first).await["status"], "success");
    assert_eq!(run_status(&s, "t1", &second).await["status"], "success");
    let texts: Vec<String> = visible_texts(&values["messages"]);
    assert_eq!(
        texts,
        ["first", "first answer", "second", "second answer"],
        "the queued run ran after the first, on its result"
    );
}

#[tokio::test]
async fn a_clarification_ends_the_run_as_success_and_the_answer_is_a_new_run() {
    let s = TestServer::start_with(
        vec![
            ScriptedReply::tool_call(
                "call_q9",
                "ask_clarification",
                json!({"question": "Which date?"}),
            ),
            ScriptedReply::text("Booked for next week."),
        ],
        Options::default(),
    )
    .await;
    s.thread("t1").await;
    let (h, events) = s
        .stream_run(
            "t1",
            json!({"input": say("Book me a flight"), "stream_mode": ["values", "messages-tuple"]}),
        )
        .await;
    let (_, run) = ids_from_location(&h);
    let tool = events
        .iter()
        .find(|e| e.event == "messages" && e.data[0]["type"] == "tool")
        .unwrap();
    assert_eq!(tool.data[0]["id"], "clarification:call_q9");
    let hi = &tool.data[0]["artifact"]["human_input"];
    assert_eq!(hi["question"], "Which date?");
    assert_eq!(hi["kind"], "human_input_request");
    assert_eq!(hi["request_id"], "clarification:call_q9");
    assert_eq!(names(&events).last(), Some(&"end"));
    assert!(!names(&events).contains(&"error"));
    assert_eq!(run_status(&s, "t1", &run).await["status"], "success");
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "idle");
    assert_eq!(s.model.calls(), 1, "no model call after the question");
    // The answer: an ordinary run whose hidden human message carries the response.
    let answer = json!({"messages": [{"type": "human", "content": [{"type": "text", "text": "Next week"}],
        "additional_kwargs": {"hide_from_ui": true, "human_input_response": {"version": 1,
            "kind": "human_input_response", "source": "ask_clarification",
            "request_id": "clarification:call_q9", "response_kind": "text", "value": "Next week"}}}]});
    let (_, events) = s.stream_run("t1", json!({"input": answer})).await;
    let values = last_values(&events);
    let msgs = visible(&values["messages"]);
    assert_eq!(msgs.last().unwrap()["content"], "Booked for next week.");
    assert_eq!(msgs[3]["additional_kwargs"]["hide_from_ui"], true);
    // The feed keeps the question's artifact and the hidden answer.
    let (_, page) = s.get("/api/threads/t1/messages/page").await;
    let kinds: Vec<&str> = strs(&page["data"], "event_type");
    assert_eq!(
        kinds,
        [
            "llm.human.input",
            "llm.ai.response",
            "llm.tool.result",
            "llm.human.input",
            "llm.ai.response"
        ]
    );
    assert_eq!(
        page["data"][2]["content"]["artifact"]["human_input"]["request_id"],
        "clarification:call_q9"
    );
}

#[tokio::test]
async fn a_resume_command_with_nothing_pending_changes_nothing() {
    let s = TestServer::start(vec![ScriptedReply::text("hi")]).await;
    s.thread("t1").await;
    s.stream_run("t1", json!({"input": say("x")})).await;
    let (_, before) = s.get("/api/threads/t1/state").await;
    let (h, events) = s
        .stream_run(
            "t1",
            json!({"command": {"resume": "yes"}, "stream_mode": ["values"]}),
        )
        .await;
    assert_eq!(names(&events), ["metadata", "values", "end"]);
    let (_, run) = ids_from_location(&h);
    assert_eq!(run_status(&s, "t1", &run).await["status"], "success");
    let (_, after) = s.get("/api/threads/t1/state").await;
    assert_eq!(after["checkpoint_id"], before["checkpoint_id"]);
}

#[tokio::test]
async fn a_run_forks_from_a_given_checkpoint() {
    let s = TestServer::start(texts(&["one", "two", "redo"])).await;
    s.thread("t1").await;
    s.stream_run("t1", json!({"input": say("first")})).await;
    let (_, mid) = s.get("/api/threads/t1/state").await;
    s.stream_run("t1", json!({"input": say("second")})).await;
    let (_, events) = s
        .stream_run(
            "t1",
            json!({"input": say("second, edited"), "checkpoint": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": mid["checkpoint_id"]}}),
        )
        .await;
    let last = last_values(&events);
    let texts: Vec<String> = visible_texts(&last["messages"]);
    assert_eq!(texts, ["first", "one", "second, edited", "redo"]);
}

#[tokio::test]
async fn restart_marks_unfinished_runs_as_error() {
    let s = TestServer::start(vec![]).await;
    s.thread("t1").await;
    let store = &s.state.app.store;
    let mut rec = antler_store::RunRecord::new("orphan-1", "t1", "lead_agent");
    rec.status = RunStatus::Running;
    store.create_run(rec).await.unwrap();
    store
        .update_thread(
            "t1",
            antler_store::ThreadUpdate {
                status: Some("busy".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // Another process would have this live; here it is an orphan: join is 409 until reconciled.
    let (code, e) = s.get("/api/threads/t1/runs/orphan-1/stream").await;
    assert_eq!(code, 409);
    assert_eq!(
        e["detail"],
        "Run orphan-1 is not active on this worker and cannot be streamed"
    );
    assert_eq!(s.state.reconcile().await.unwrap(), (1, 1));
    let r = run_status(&s, "t1", "orphan-1").await;
    assert_eq!(r["status"], "error");
    assert_eq!(r["stop_reason"], "orphan_recovered");
    let (_, t) = s.get("/api/threads/t1").await;
    assert_eq!(t["status"], "error");
    let resp = s
        .raw("GET", "/api/threads/t1/runs/orphan-1/stream", &[])
        .await;
    assert_eq!(names(&parse_sse(&resp.text().await.unwrap())), ["end"]);
}

#[tokio::test]
async fn multitask_rollback_restores_then_runs_the_new_input() {
    let s = TestServer::gated(texts(&["kept", "dropped", "new"])).await;
    s.thread("t1").await;
    s.model.open(1);
    s.stream_run("t1", json!({"input": say("one")})).await;
    let (old, mut old_stream) = start_detached(&s, "two").await;
    let r = s.stream_req("t1",
        json!({"input": say("three"), "multitask_strategy": "rollback", "on_disconnect": "continue"}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    old_stream.rest().await;
    let o = run_status(&s, "t1", &old).await;
    assert_eq!(
        (o["status"].as_str(), o["error"].as_str()),
        (Some("error"), Some("Rolled back by user"))
    );
    s.model.open(1);
    let events = SseReader::new(r).rest().await;
    let last = last_values(&events);
    let texts: Vec<String> = visible_texts(&last["messages"]);
    assert_eq!(
        texts,
        ["one", "kept", "three", "dropped"],
        "\"two\" was rolled back"
    );
}

#[tokio::test]
async fn server_runs_are_journaled_before_their_end_event() {
    let s = TestServer::start(ls_then("c1", "d", "done")).await;
    s.thread("tj").await;
    s.stream_run("tj", json!({"input": say("look")})).await;
    let runs = s.state.app.store.list_runs("tj", 10).await.unwrap();
    let run = &runs[0].run_id;
    let events = s
        .state
        .app
        .store
        .list_run_events(run, antler_store::EventQuery::default())
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    for k in [
        "run.start",
        "llm.human.input",
        "llm.ai.response",
        "llm.tool.result",
        "run.end",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    let tool = events
        .iter()
        .find(|e| e.event_type == "llm.tool.result")
        .unwrap();
    assert_eq!(tool.content["tool_call_id"], "c1");
}

#[tokio::test]
async fn a_corrupt_head_checkpoint_is_repaired_under_serve_too() {
    let s = TestServer::start(texts(&["one", "two"])).await;
    s.thread("hurt").await;
    s.stream_run("hurt", json!({"input": say("first")})).await;
    let store = &s.state.app.store;
    let head = store.latest_checkpoint("hurt").await.unwrap().unwrap();
    // Damage the head in place through a second connection, as a torn write would.
    let raw = rusqlite::Connection::open(s.home.path().join("antler.db")).unwrap();
    let n = raw
        .execute(
            "UPDATE checkpoints SET metadata = '{' WHERE checkpoint_id = ?1",
            [&head.meta.checkpoint_id],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(raw);
    assert!(
        store.latest_checkpoint("hurt").await.is_err(),
        "the head no longer decodes"
    );

    let (headers, events) = s.stream_run("hurt", json!({"input": say("second")})).await;
    let (_, run) = ids_from_location(&headers);
    assert_eq!(names(&events).last(), Some(&"end"));
    assert!(!names(&events).contains(&"error"), "{events:?}");
    assert_eq!(run_status(&s, "hurt", &run).await["status"], "success");
    let last = last_values(&events);
    let texts: Vec<String> = visible_texts(&last["messages"]);
    assert_eq!(texts, ["first", "one", "second", "two"]);
    let journal = store
        .list_run_events(&run, antler_store::EventQuery::default())
        .await
        .unwrap();
    assert!(
        journal
            .iter()
            .any(|e| e.event_type == "checkpoint.recovered"),
        "{journal:?}"
    );
}
