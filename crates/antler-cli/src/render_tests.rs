#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use antler_protocol::{AiMessage, AiMessageChunk, MessageMeta, StateUpdate, ToolCall, ToolMessage};
use std::sync::Arc;

fn meta() -> Arc<MessageMeta> {
    Arc::new(MessageMeta {
        langgraph_node: "model",
        langgraph_step: 1,
        langgraph_checkpoint_ns: "model:x".into(),
        checkpoint_ns: "model:x".into(),
        thread_id: "t".into(),
        run_id: "r".into(),
        assistant_id: "lead_agent".into(),
        ls_provider: None,
        ls_model_name: None,
    })
}

fn chunk(id: &str, text: &str) -> StreamEvent {
    StreamEvent::Messages {
        message: StreamMessage::AiChunk(AiMessageChunk {
            content: text.into(),
            id: Some(id.into()),
            ..Default::default()
        }),
        meta: meta(),
    }
}

/// An AI message `id` saying `text`.
fn ai(id: &str, text: &str) -> AiMessage {
    AiMessage {
        content: text.into(),
        id: Some(id.into()),
        ..Default::default()
    }
}

fn model_update(ai: AiMessage) -> StreamEvent {
    StreamEvent::Updates {
        node: "model".into(),
        update: Arc::new(StateUpdate::message(ai)),
    }
}

#[test]
fn text_streams_tokens_and_one_line_per_tool_call_and_outcome() {
    let r = TextRenderer::new(Vec::new(), Vec::new());
    r.emit(chunk("a1", "Let me "));
    r.emit(chunk("a1", "look."));
    let mut looking = ai("a1", "Let me look.");
    let mut args = serde_json::Map::new();
    args.insert("description".into(), json!("list"));
    args.insert("path".into(), json!("/mnt/user-data/workspace"));
    looking.tool_calls.push(ToolCall::new("c1", "ls", args));
    r.emit(model_update(looking));
    r.emit(StreamEvent::Messages {
        message: StreamMessage::Tool(
            ToolMessage::error("c1", "Error: Directory not found\nmore").with_name("ls"),
        ),
        meta: meta(),
    });
    r.emit(chunk("a2", "Done."));
    r.emit(model_update(ai("a2", "Done.")));
    r.finish();
    let (out, err) = r.into_inner().unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "Let me look.\nDone.\n");
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "  → ls(/mnt/user-data/workspace)\n  ✗ ls: Error: Directory not found more\n"
    );
}

#[test]
fn text_prints_non_streamed_answers_from_the_model_update() {
    let r = TextRenderer::new(Vec::new(), Vec::new());
    r.emit(model_update(ai("a", "whole answer")));
    r.finish();
    let (out, _) = r.into_inner().unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "whole answer\n");
}

#[test]
fn jsonl_writes_one_named_event_per_line() {
    let r = JsonlRenderer::new(Vec::new());
    r.emit(StreamEvent::Metadata {
        run_id: "r".into(),
        thread_id: "t".into(),
    });
    r.emit(chunk("a", "hi"));
    r.emit(StreamEvent::End);
    let out = String::from_utf8(r.into_inner().unwrap()).unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[0],
        json!({"event": "metadata", "data": {"run_id": "r", "thread_id": "t", "attempt": 1}})
    );
    assert_eq!(lines[1]["event"], "messages");
    assert_eq!(lines[1]["data"][0]["type"], "AIMessageChunk");
    assert_eq!(lines[1]["data"][1]["langgraph_node"], "model");
    assert_eq!(lines[2], json!({"event": "end", "data": null}));
}

#[test]
fn text_prints_tool_progress_lines_under_the_call() {
    let r = TextRenderer::new(Vec::new(), Vec::new());
    r.emit(StreamEvent::Custom(json!({
        "type": "tool_progress", "tool_call_id": "c1", "tool": "bash", "message": "step 1\tok",
    })));
    r.emit(StreamEvent::Custom(
        json!({"type": "task_started", "description": "dig"}),
    ));
    r.emit(StreamEvent::Custom(json!({"type": "task_running", "task_id": "t", "message": {
        "type": "ai", "content": "", "tool_calls": [{"name": "web_search", "args": {"query": "rust"}, "id": "x"}],
    }})));
    r.emit(StreamEvent::Custom(
        json!({"type": "task_running", "task_id": "t", "message": {
            "type": "ai", "content": "found it",
        }}),
    ));
    let (out, err) = r.into_inner().unwrap();
    assert!(out.is_empty());
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "    ┆ step 1 ok\n  · task_started: dig\n    ┆ subagent: → web_search(rust)\n    ┆ subagent: found it\n"
    );
}

/// A state of three messages (one with a tool call) and a title, as a `values` event.
fn values_event() -> (StreamEvent, Arc<Vec<Arc<Message>>>) {
    let mut state = antler_protocol::ThreadState {
        title: Some("a \"quoted\" title".into()),
        ..Default::default()
    };
    state
        .messages
        .push(Message::Human(antler_protocol::HumanMessage {
            content: "list the files".into(),
            id: Some("h1".into()),
            ..Default::default()
        }));
    state.messages.push(Message::Ai(AiMessage {
        tool_calls: vec![ToolCall {
            name: "ls".into(),
            args: json!({"path": "/mnt/user-data/workspace"})
                .as_object()
                .cloned()
                .unwrap(),
            id: Some("c1".into()),
            kind: "tool_call".into(),
        }]
        .into(),
        ..ai("a1", "")
    }));
    state.messages.push(Message::Tool(ToolMessage {
        name: Some("ls".into()),
        ..ToolMessage::new("c1", "notes.md\n")
    }));
    let snapshot = state.snapshot();
    let list = snapshot.messages.clone();
    (StreamEvent::Values(snapshot), list)
}

#[test]
fn jsonl_values_lines_are_the_event_and_its_data() {
    let (event, _) = values_event();
    let expected = json!({"event": "values", "data": event.data()}).to_string();
    let r = JsonlRenderer::new(Vec::new());
    r.emit(event);
    let out = String::from_utf8(r.into_inner().unwrap()).unwrap();
    assert_eq!(out, format!("{expected}\n"));
    let line: Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(line["data"]["messages"][1]["tool_calls"][0]["name"], "ls");
    assert_eq!(line["data"]["title"], "a \"quoted\" title");
}

#[test]
fn jsonl_held_values_let_go_of_the_list_and_write_the_same_line_on_release() {
    let (event, list) = values_event();
    let emitted = {
        let r = JsonlRenderer::new(Vec::new());
        r.emit(StreamEvent::Values(match &event {
            StreamEvent::Values(s) => s.clone(),
            _ => unreachable!(),
        }));
        String::from_utf8(r.into_inner().unwrap()).unwrap()
    };
    let r = JsonlRenderer::new(Vec::new());
    let held = r.hold(event);
    // Only the test's own handle is left: the run could write its list in place.
    assert_eq!(Arc::strong_count(&list), 1);
    let Held::Prepared(deliver) = held else {
        panic!("a held event is rendered at once");
    };
    r.emit(StreamEvent::End);
    deliver();
    let out = String::from_utf8(r.into_inner().unwrap()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0], r#"{"event":"end","data":null}"#);
    assert_eq!(format!("{}\n", lines[1]), emitted);
}
