use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn ai_message_round_trips_langchain_dump() {
    let wire = json!({
        "content": "hi",
        "additional_kwargs": {"reasoning_content": "think", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\":\"/\"}"}}
        ]},
        "response_metadata": {"finish_reason": "tool_calls", "model_name": "m"},
        "type": "ai",
        "name": null,
        "id": "lc_run--1",
        "tool_calls": [{"name": "ls", "args": {"path": "/"}, "id": "call_1", "type": "tool_call"}],
        "invalid_tool_calls": [],
        "usage_metadata": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    });
    let msg: Message = serde_json::from_value(wire.clone()).unwrap();
    let back = serde_json::to_value(&msg).unwrap();
    assert_eq!(back, wire);
    // Field names in LangChain order after the discriminator.
    let keys: Vec<&str> = back
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "type",
            "content",
            "additional_kwargs",
            "response_metadata",
            "name",
            "id",
            "tool_calls",
            "invalid_tool_calls",
            "usage_metadata"
        ]
    );
}

#[test]
fn tool_message_round_trips_with_artifact_and_status() {
    let wire = json!({
        "type": "tool", "content": "Error: nope", "additional_kwargs": {}, "response_metadata": {},
        "name": "bash", "id": "t1", "tool_call_id": "call_1",
        "artifact": {"human_input": {"question": "?"}}, "status": "error"
    });
    let msg: Message = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&msg).unwrap(), wire);
    let tm = msg.as_tool().unwrap();
    assert_eq!(tm.status, ToolStatus::Error);
}

#[test]
fn human_content_blocks_are_kept_verbatim() {
    let wire = json!({
        "type": "human",
        "content": [{"type": "text", "text": "a"}, "b", {"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "thinking", "thinking": "x", "signature": "s"}],
        "additional_kwargs": {"files": [{"filename": "a.pdf"}]}, "response_metadata": {}, "name": null, "id": "h1"
    });
    let msg: Message = serde_json::from_value(wire.clone()).unwrap();
    assert_eq!(serde_json::to_value(&msg).unwrap(), wire);
    assert_eq!(msg.text(), "a\nb");
}

#[test]
fn text_skips_empty_parts_and_non_text_blocks() {
    let c = Content::Blocks(vec![
        json!(""),
        json!({"type": "text", "text": "x"}),
        json!(42),
        json!({"type":"text","text":""}),
        json!("y"),
    ]);
    assert_eq!(c.text(), "x\ny");
}

#[test]
fn from_input_accepts_role_aliases_pairs_and_strings() {
    let cases = [
        (json!({"role": "user", "content": "a"}), "human"),
        (json!({"role": "assistant", "content": "a"}), "ai"),
        (json!({"role": "developer", "content": "a"}), "system"),
        (
            json!({"type": "AIMessageChunk", "content": "a", "tool_call_chunks": []}),
            "ai",
        ),
        (json!(["human", "hi"]), "human"),
        (json!("just text"), "human"),
        (
            json!({"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"], "kwargs": {"content": "x"}}),
            "human",
        ),
    ];
    for (input, kind) in cases {
        let m = Message::from_input(input.clone()).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(m.kind(), kind, "{input}");
    }
}

#[test]
fn from_input_rejects_unknown_role_and_tool_without_id() {
    assert_eq!(
        Message::from_input(json!({"role": "wizard", "content": "a"})),
        Err(MessageParseError::UnknownRole("wizard".into()))
    );
    assert_eq!(
        Message::from_input(json!({"role": "tool", "content": "a"})),
        Err(MessageParseError::MissingToolCallId)
    );
    assert_eq!(
        Message::from_input(json!(7)),
        Err(MessageParseError::BadShape)
    );
}

#[test]
fn tool_call_id_and_content_are_coerced() {
    let m = Message::from_input(json!({"role": "tool", "tool_call_id": 12, "content": {"a": 1}}))
        .unwrap();
    let t = m.as_tool().unwrap();
    assert_eq!(t.tool_call_id, "12");
    assert_eq!(t.content, Content::Text("{\"a\":1}".into()));
}

#[test]
fn raw_provider_tool_calls_are_backfilled() {
    let m = Message::from_input(json!({
        "role": "assistant", "content": "",
        "additional_kwargs": {"tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \"/x\"}"}},
            {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}
        ]}
    }))
    .unwrap();
    let ai = m.as_ai().unwrap();
    assert_eq!(ai.tool_calls.len(), 1);
    assert_eq!(ai.tool_calls[0].args["path"], "/x");
    assert_eq!(ai.invalid_tool_calls.len(), 1);
    assert_eq!(ai.invalid_tool_calls[0].args.as_deref(), Some("{not json"));
    // The raw copy stays.
    assert_eq!(
        ai.additional_kwargs["tool_calls"].as_array().unwrap().len(),
        2
    );
}

#[test]
fn set_tool_calls_keeps_mirrors_consistent() {
    let mut ai: AiMessage = serde_json::from_value(json!({
        "content": "", "id": "x",
        "additional_kwargs": {"tool_calls": [{"id": "a"}, {"id": "b"}], "function_call": {"name": "f"}},
        "response_metadata": {"finish_reason": "tool_calls"},
        "tool_calls": [{"name": "t", "args": {}, "id": "a"}, {"name": "t", "args": {}, "id": "b"}]
    }))
    .unwrap();
    let keep = vec![ai.tool_calls[1].clone()];
    ai.set_tool_calls(keep);
    assert_eq!(ai.additional_kwargs["tool_calls"], json!([{"id": "b"}]));
    assert!(ai.additional_kwargs.contains_key("function_call"));
    assert_eq!(ai.finish_reason(), Some("tool_calls"));

    ai.set_tool_calls(vec![]);
    assert!(!ai.additional_kwargs.contains_key("tool_calls"));
    assert!(!ai.additional_kwargs.contains_key("function_call"));
    assert_eq!(ai.finish_reason(), Some("stop"));

    let mut filtered = AiMessage::default();
    filtered
        .response_metadata
        .insert("finish_reason".into(), json!("content_filter"));
    filtered.set_tool_calls(vec![]);
    assert_eq!(filtered.finish_reason(), Some("content_filter"));
}

#[test]
fn chunk_serializes_as_ai_message_chunk() {
    let chunk = AiMessageChunk {
        content: "Hel".into(),
        id: Some("lc_run--1".into()),
        tool_call_chunks: vec![ToolCallChunk {
            name: Some("bash".into()),
            args: Some("{\"comm".into()),
            id: Some("call_1".into()),
            index: Some(0),
            kind: "tool_call_chunk".into(),
        }],
        ..Default::default()
    };
    let v = serde_json::to_value(&chunk).unwrap();
    assert_eq!(v["type"], "AIMessageChunk");
    assert_eq!(v["content"], "Hel");
    assert_eq!(v["tool_call_chunks"][0]["args"], "{\"comm");
    assert_eq!(v["tool_calls"][0]["args"], json!({}));
    assert_eq!(v["chunk_position"], Value::Null);
}

#[test]
fn a_borrowed_message_writes_the_same_bytes_as_the_message() {
    let messages: Vec<Message> = serde_json::from_value(json!([
        {"type": "human", "content": "hi", "id": "h1", "additional_kwargs": {"k": 1}},
        {"type": "ai", "content": "", "id": "a1",
         "tool_calls": [{"id": "c1", "name": "bash", "args": {"command": "ls"}}],
         "usage_metadata": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}},
        {"type": "tool", "tool_call_id": "c1", "name": "bash", "content": "ok", "status": "error"},
        {"type": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"type": "remove", "id": "h1"},
    ]))
    .unwrap();
    for m in &messages {
        assert_eq!(
            serde_json::to_string(&MessageRef::from(m)).unwrap(),
            serde_json::to_string(m).unwrap()
        );
    }
}
