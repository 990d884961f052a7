//! The Anthropic Messages adapter against the mock server of `antler-test-support`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use antler_models::providers::anthropic::{AnthropicConfig, AnthropicModel};
use antler_models::{ChatModel, ChatRequest, ModelError};
use antler_protocol::{
    AiMessage, AiMessageChunk, Content, InvalidToolCall, Message, Object, ToolCall, ToolMessage,
    ToolSpec, UsageMetadata,
};
use antler_test_support::{anthropic_error, AnthropicBlock, AnthropicReply, MockAnthropic};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MESSAGE_ID: &str = "lc_run--test-1";
const MODEL: &str = "claude-test";

fn config(mock: &MockAnthropic) -> AnthropicConfig {
    AnthropicConfig::new(MODEL)
        .with_base_url(mock.base_url())
        .with_api_key(Some("sk-ant-test".into()))
}

fn model(mock: &MockAnthropic) -> AnthropicModel {
    AnthropicModel::new(config(mock)).unwrap()
}

fn obj(v: Value) -> Object {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

/// Owned pieces of a [`ChatRequest`].
#[derive(Default)]
struct Call {
    system: Option<String>,
    messages: Vec<Arc<Message>>,
    tools: Vec<Arc<ToolSpec>>,
    tool_choice: Option<Value>,
    settings: Object,
}

impl Call {
    fn user(text: &str) -> Self {
        Call {
            system: Some("You are a test.".into()),
            messages: vec![Arc::new(Message::human(text))],
            ..Default::default()
        }
    }

    fn then(mut self, msg: impl Into<Message>) -> Self {
        self.messages.push(Arc::new(msg.into()));
        self
    }

    fn req(&self) -> ChatRequest<'_> {
        ChatRequest {
            system: self.system.as_deref(),
            messages: &self.messages,
            tools: &self.tools,
            tool_choice: self.tool_choice.as_ref(),
            settings: &self.settings,
            message_id: MESSAGE_ID,
        }
    }
}

fn tool(name: &str) -> Arc<ToolSpec> {
    Arc::new(ToolSpec {
        name: name.into(),
        description: format!("The {name} tool"),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    })
}

async fn stream(
    model: &AnthropicModel,
    call: &Call,
) -> (Result<AiMessage, ModelError>, Vec<AiMessageChunk>) {
    let mut chunks = Vec::new();
    let mut sink = |c: AiMessageChunk| chunks.push(c);
    let res = model.stream(call.req(), &mut sink).await;
    (res, chunks)
}

fn text_of(chunks: &[AiMessageChunk]) -> String {
    chunks.iter().map(|c| c.content.text()).collect()
}

fn reasoning_of(chunks: &[AiMessageChunk]) -> Vec<&str> {
    chunks
        .iter()
        .filter_map(|c| {
            c.additional_kwargs
                .get("reasoning_content")
                .and_then(Value::as_str)
        })
        .collect()
}

fn usage(input: u64, output: u64, cache_read: u64, cache_creation: u64) -> UsageMetadata {
    UsageMetadata {
        input_token_details: Some(obj(
            json!({"cache_read": cache_read, "cache_creation": cache_creation}),
        )),
        ..UsageMetadata::new(input + cache_read + cache_creation, output)
    }
}

fn without_provider_id(mut m: AiMessage) -> AiMessage {
    m.response_metadata.remove("id");
    m
}

/// Invoke and stream the same call (the mock needs two replies queued); both results.
async fn both(model: &AnthropicModel, call: &Call) -> [AiMessage; 2] {
    let invoked = model.invoke(call.req()).await.unwrap();
    let (streamed, _) = stream(model, call).await;
    [invoked, streamed.unwrap()]
}

#[tokio::test]
async fn text_reply_without_streaming() {
    let mock = MockAnthropic::start()
        .await
        .require_api_key("sk-ant-test")
        .with_replies([AnthropicReply::text("Hello there, friend.").usage(12, 4)]);
    let msg = model(&mock).invoke(Call::user("hi").req()).await.unwrap();
    assert_eq!(
        msg,
        AiMessage {
            content: "Hello there, friend.".into(),
            response_metadata: obj(json!({
                "finish_reason": "stop",
                "model_name": MODEL,
                "id": "msg_mock_1",
                "stop_reason": "end_turn",
                "stop_sequence": null,
            })),
            id: Some(MESSAGE_ID.into()),
            usage_metadata: Some(usage(12, 4, 0, 0)),
            ..Default::default()
        }
    );

    let req = mock.last_request().unwrap();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(req.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.body,
        json!({
            "model": MODEL,
            "max_tokens": 4096,
            "system": "You are a test.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn streamed_text_concatenates_to_the_final_message() {
    let reply = || AnthropicReply::text("one two three four").usage(9, 5);
    let mock = MockAnthropic::start()
        .await
        .with_replies([reply(), reply()]);
    let model = model(&mock);
    let call = Call::user("count");
    let (res, chunks) = stream(&model, &call).await;
    let msg = res.unwrap();

    assert_eq!(msg.content, Content::Text("one two three four".into()));
    assert_eq!(text_of(&chunks), "one two three four");
    assert!(
        chunks.len() >= 5,
        "several deltas and a final chunk: {chunks:?}"
    );
    assert!(chunks.iter().all(|c| c.id.as_deref() == Some(MESSAGE_ID)));
    let (last, deltas) = chunks.split_last().unwrap();
    assert!(deltas
        .iter()
        .all(|c| c.chunk_position.is_none() && c.usage_metadata.is_none()));
    assert_eq!(last.chunk_position.as_deref(), Some("last"));
    assert_eq!(last.usage_metadata, Some(usage(9, 5, 0, 0)));
    assert_eq!(last.response_metadata, msg.response_metadata);
    assert_eq!(msg.finish_reason(), Some("stop"));
    assert_eq!(mock.requests()[0].body["stream"], json!(true));

    let unstreamed = model.invoke(call.req()).await.unwrap();
    assert!(mock.requests()[1].body.get("stream").is_none());
    assert_eq!(without_provider_id(unstreamed), without_provider_id(msg));
}

#[tokio::test]
async fn tool_use_round_trip_groups_results_and_flags_errors() {
    for streaming in [false, true] {
        let mock = MockAnthropic::start().await.with_replies([
            AnthropicReply::blocks([
                AnthropicBlock::text("Checking both."),
                AnthropicBlock::tool_use("toolu_a", "ls", json!({"path": "/mnt"})),
                AnthropicBlock::tool_use("toolu_b", "read_file", json!({"path": "/x"})),
            ]),
            AnthropicReply::text("Done."),
        ]);
        let model = model(&mock);
        let mut call = Call::user("look");
        call.tools = vec![tool("ls"), tool("read_file")];
        let first = if streaming {
            stream(&model, &call).await.0.unwrap()
        } else {
            model.invoke(call.req()).await.unwrap()
        };
        assert_eq!(first.finish_reason(), Some("tool_calls"));
        assert_eq!(first.response_metadata["stop_reason"], json!("tool_use"));
        assert_eq!(
            first.tool_calls,
            vec![
                ToolCall::new("toolu_a", "ls", obj(json!({"path": "/mnt"}))),
                ToolCall::new("toolu_b", "read_file", obj(json!({"path": "/x"}))),
            ]
        );
        assert_eq!(
            first.content,
            Content::Blocks(vec![
                json!({"type": "text", "text": "Checking both."}),
                json!({"type": "tool_use", "id": "toolu_a", "name": "ls", "input": {"path": "/mnt"}}),
                json!({"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "/x"}}),
            ]),
            "streaming: {streaming}"
        );

        let call = call
            .then(first)
            .then(ToolMessage::new("toolu_a", "a.txt").with_name("ls"))
            .then(ToolMessage::error("toolu_b", "Error: no such file").with_name("read_file"));
        let second = model.invoke(call.req()).await.unwrap();
        assert_eq!(second.content, Content::Text("Done.".into()));
        mock.assert_no_violations();
        let body = mock.last_request().unwrap().body;
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "look"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking both."},
                    {"type": "tool_use", "id": "toolu_a", "name": "ls", "input": {"path": "/mnt"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "read_file", "input": {"path": "/x"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.txt"},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "Error: no such file", "is_error": true},
                ]},
            ])
        );
        assert_eq!(
            body["tools"],
            json!([
                {"name": "ls", "description": "The ls tool", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "read_file", "description": "The read_file tool", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
            ])
        );
    }
}

#[tokio::test]
async fn parallel_tool_use_streams_chunks_by_call_index() {
    let reply = || {
        AnthropicReply::blocks([
            AnthropicBlock::text("Let me look."),
            AnthropicBlock::tool_use(
                "toolu_a",
                "bash",
                json!({"command": "ls -la /mnt/user-data"}),
            ),
            AnthropicBlock::tool_use(
                "toolu_b",
                "read_file",
                json!({"path": "/mnt/a.txt", "limit": 20}),
            ),
        ])
    };
    let mock = MockAnthropic::start()
        .await
        .with_replies([reply(), reply()]);
    let model = model(&mock);
    let call = Call::user("look around");
    let (res, chunks) = stream(&model, &call).await;
    let msg = res.unwrap();

    let expected = [
        json!({"command": "ls -la /mnt/user-data"}),
        json!({"path": "/mnt/a.txt", "limit": 20}),
    ];
    assert_eq!(
        msg.tool_calls,
        vec![
            ToolCall::new("toolu_a", "bash", obj(expected[0].clone())),
            ToolCall::new("toolu_b", "read_file", obj(expected[1].clone())),
        ]
    );
    assert_eq!(text_of(&chunks), "Let me look.");
    let fragments: Vec<_> = chunks
        .iter()
        .flat_map(|c| c.tool_call_chunks.iter())
        .collect();
    assert!(fragments.iter().all(|f| matches!(f.index, Some(0 | 1))));
    for index in [0, 1] {
        let of_call: Vec<_> = fragments
            .iter()
            .filter(|f| f.index == Some(index))
            .collect();
        assert!(of_call.len() >= 3, "input split into several fragments");
        assert!(of_call[0].id.is_some() && of_call[0].name.is_some());
        assert!(of_call[1..]
            .iter()
            .all(|f| f.id.is_none() && f.name.is_none()));
        let args: String = of_call.iter().filter_map(|f| f.args.as_deref()).collect();
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(parsed, expected[index as usize]);
    }

    let unstreamed = model.invoke(call.req()).await.unwrap();
    assert_eq!(without_provider_id(unstreamed), without_provider_id(msg));
}

#[tokio::test]
async fn thinking_blocks_are_kept_streamed_and_replayed_with_their_signature() {
    let reply = || {
        AnthropicReply::blocks([
            AnthropicBlock::thinking("First, think hard about it.", "sig-Ek8hAg=="),
            AnthropicBlock::redacted_thinking("EncryptedBlob=="),
            AnthropicBlock::text("42"),
        ])
        .usage(20, 10)
    };
    let mock =
        MockAnthropic::start()
            .await
            .with_replies([reply(), reply(), AnthropicReply::text("sure")]);
    let model = AnthropicModel::new(
        config(&mock)
            .with_max_tokens(8192)
            .with_thinking(json!({"type": "enabled", "budget_tokens": 2048})),
    )
    .unwrap();
    let call = Call::user("meaning?");
    let msg = model.invoke(call.req()).await.unwrap();
    let blocks = vec![
        json!({"type": "thinking", "thinking": "First, think hard about it.", "signature": "sig-Ek8hAg=="}),
        json!({"type": "redacted_thinking", "data": "EncryptedBlob=="}),
        json!({"type": "text", "text": "42"}),
    ];
    assert_eq!(msg.content, Content::Blocks(blocks.clone()));
    assert_eq!(
        msg.additional_kwargs,
        obj(json!({"reasoning_content": "First, think hard about it."}))
    );
    assert_eq!(msg.content.text(), "42");

    let (res, chunks) = stream(&model, &call).await;
    let streamed = res.unwrap();
    let reasoning = reasoning_of(&chunks);
    assert!(
        reasoning.len() > 1,
        "thinking streamed in deltas: {reasoning:?}"
    );
    assert_eq!(reasoning.concat(), "First, think hard about it.");
    assert_eq!(text_of(&chunks), "42");
    assert_eq!(
        without_provider_id(streamed.clone()),
        without_provider_id(msg)
    );

    // The next turn replays the blocks untouched.
    let call = call.then(streamed).then(Message::human("are you sure?"));
    model.invoke(call.req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": blocks})
    );
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(body["max_tokens"], json!(8192));
    mock.assert_no_violations();
}

#[tokio::test]
async fn thinking_settings_are_checked_and_shape_the_request() {
    let mock = MockAnthropic::start().await;
    let bad = |thinking: Value, max: Option<u64>| {
        let mut cfg = config(&mock).with_thinking(thinking);
        cfg.max_tokens = max;
        AnthropicModel::new(cfg).unwrap_err()
    };
    for err in [
        bad(json!({"type": "enabled", "budget_tokens": 512}), None),
        bad(json!({"type": "enabled", "budget_tokens": 4096}), None),
        bad(
            json!({"type": "enabled", "budget_tokens": 2048}),
            Some(2048),
        ),
        bad(json!({"type": "enabled"}), None),
        bad(json!("on"), None),
    ] {
        assert!(matches!(err, ModelError::InvalidRequest(_)), "{err:?}");
    }

    // Thinking on: temperature is not sent, a forced tool choice becomes the model's choice.
    let mut cfg = config(&mock)
        .with_max_tokens(16000)
        .with_thinking(json!({"type": "enabled", "budget_tokens": 10000}));
    cfg.temperature = Some(0.2);
    let model = AnthropicModel::new(cfg).unwrap();
    let call = Call {
        tools: vec![tool("ls")],
        tool_choice: Some(json!("required")),
        ..Call::user("x")
    };
    model.invoke(call.req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert!(
        body.get("temperature").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );

    // Disabled: sent as is; temperature kept; a per-call max_tokens below the budget is refused.
    let mut cfg = config(&mock).with_thinking(json!({"type": "disabled"}));
    cfg.temperature = Some(0.2);
    let model = AnthropicModel::new(cfg).unwrap();
    model.invoke(Call::user("x").req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert_eq!(body["temperature"], json!(0.2));

    let model = AnthropicModel::new(
        config(&mock).with_thinking(json!({"type": "enabled", "budget_tokens": 2048})),
    )
    .unwrap();
    let call = Call {
        settings: obj(json!({"max_tokens": 1500})),
        ..Call::user("x")
    };
    let err = model.invoke(call.req()).await.unwrap_err();
    assert!(matches!(err, ModelError::InvalidRequest(_)), "{err:?}");
    assert_eq!(mock.request_count(), 2, "an invalid request is not sent");
}

#[tokio::test]
async fn usage_counts_cache_tokens_as_input() {
    let reply = || {
        AnthropicReply::text("cached")
            .usage(100, 20)
            .cache_tokens(300, 50)
    };
    let mock = MockAnthropic::start()
        .await
        .with_replies([reply(), reply()]);
    let model = model(&mock);
    let call = Call::user("x");
    let expected = usage(100, 20, 300, 50);
    assert_eq!(expected.input_tokens, 450);
    assert_eq!(expected.total_tokens, 470);
    for msg in both(&model, &call).await {
        assert_eq!(msg.usage_metadata, Some(expected.clone()));
    }
}

#[tokio::test]
async fn stop_reasons_map_to_finish_reasons() {
    let mock = MockAnthropic::start().await;
    let model = model(&mock);
    for (stop, finish) in [
        ("refusal", "refusal"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("pause_turn", "pause_turn"),
    ] {
        mock.push(AnthropicReply::text("partial").stop_reason(stop));
        mock.push(AnthropicReply::text("partial").stop_reason(stop));
        for msg in both(&model, &Call::user("x")).await {
            assert_eq!(msg.finish_reason(), Some(finish));
            assert_eq!(msg.response_metadata["stop_reason"], json!(stop));
        }
    }
}

#[tokio::test]
async fn rate_limit_and_overload_carry_retry_after() {
    let mock = MockAnthropic::start().await.with_replies([
        AnthropicReply::rate_limited(7),
        AnthropicReply::rate_limited(7),
        AnthropicReply::overloaded().retry_after(2),
        AnthropicReply::overloaded().retry_after(2),
    ]);
    let model = model(&mock);
    let call = Call::user("x");
    for (status, secs, code, message) in [
        (
            429,
            7,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        ),
        (529, 2, "overloaded_error", "Overloaded"),
    ] {
        for err in [
            model.invoke(call.req()).await.unwrap_err(),
            stream(&model, &call).await.0.unwrap_err(),
        ] {
            let ModelError::Http {
                status: got,
                retry_after,
                message: got_message,
                code: got_code,
                body,
            } = &err
            else {
                panic!("expected Http, got {err:?}")
            };
            assert_eq!(*got, status);
            assert_eq!(*retry_after, Some(Duration::from_secs(secs)));
            assert_eq!(got_message, message);
            assert_eq!(got_code.as_deref(), Some(code));
            assert!(body.contains(code));
            assert!(err.is_transient());
        }
    }
}

#[tokio::test]
async fn wrong_api_key_is_a_401_with_message_and_type() {
    let mock = MockAnthropic::start().await.require_api_key("sk-ant-right");
    let err = model(&mock)
        .invoke(Call::user("x").req())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(401));
    let ModelError::Http { message, code, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(message, "invalid x-api-key");
    assert_eq!(code.as_deref(), Some("authentication_error"));
    assert!(!err.is_transient());

    let mut cfg = config(&mock);
    cfg.api_key = Some("sk-ant-right".into());
    let ok = AnthropicModel::new(cfg)
        .unwrap()
        .invoke(Call::user("x").req())
        .await
        .unwrap();
    assert_eq!(ok.content, Content::Text("ok".into()));
}

#[tokio::test]
async fn undecodable_success_bodies_are_decode_errors() {
    let mock = MockAnthropic::start().await.with_replies([
        AnthropicReply::raw_body(200, "{not json"),
        AnthropicReply::raw_body(200, r#"{"id":"msg_1","type":"message","role":"assistant"}"#),
        AnthropicReply::raw_body(
            200,
            &anthropic_error("api_error", "upstream overloaded").to_string(),
        ),
        AnthropicReply::raw_body(200, r#"{"type":"completion","completion":"hi"}"#),
    ]);
    let model = model(&mock);
    let call = Call::user("x");
    for expected in [
        "not a Messages API message",
        "no content",
        "api_error: upstream overloaded",
        "type 'completion'",
    ] {
        match model.invoke(call.req()).await {
            Err(ModelError::Decode(msg)) => assert!(msg.contains(expected), "{msg}"),
            other => panic!("expected Decode, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn undecodable_stream_events_are_decode_errors() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::raw_body(
            200,
            "event: message_start\ndata: {not json\n\n",
        )]);
    let (res, _) = stream(&model(&mock), &Call::user("x")).await;
    assert!(matches!(res, Err(ModelError::Decode(_))), "{res:?}");
}

#[tokio::test]
async fn error_event_mid_stream() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("a b c").error_after_events(
            4,
            json!({"type": "overloaded_error", "message": "Overloaded"}),
        )]);
    let (res, chunks) = stream(&model(&mock), &Call::user("x")).await;
    match res {
        Err(ModelError::Stream(msg)) => {
            assert!(msg.contains("overloaded_error: Overloaded"), "{msg}")
        }
        other => panic!("expected Stream, got {other:?}"),
    }
    assert_eq!(
        text_of(&chunks),
        "a ",
        "deltas before the error were forwarded"
    );
}

#[tokio::test]
async fn hang_hits_the_request_timeout() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::hang(), AnthropicReply::hang()]);
    let cfg = config(&mock).with_request_timeout(Duration::from_millis(300));
    let model = AnthropicModel::new(cfg).unwrap();
    let call = Call::user("x");
    assert_eq!(
        model.invoke(call.req()).await.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(
        stream(&model, &call).await.0.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
}

#[tokio::test]
async fn stream_gap_hits_the_chunk_timeout() {
    // message_start, ping, block start, two text deltas, then silence.
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("never finishes this").stall_after_events(5)]);
    let cfg = config(&mock).with_stream_chunk_timeout(Duration::from_millis(300));
    let (res, chunks) = stream(&AnthropicModel::new(cfg).unwrap(), &Call::user("x")).await;
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(text_of(&chunks), "never finishes ");
}

#[tokio::test]
async fn ping_events_do_not_reset_the_chunk_timeout() {
    // message_start, ping, block start, two text deltas, then only `ping` events.
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("never finishes this")
            .stall_after_events(5)
            .keepalive_while_stalled(Duration::from_millis(50))]);
    let cfg = config(&mock).with_stream_chunk_timeout(Duration::from_millis(300));
    let model = AnthropicModel::new(cfg).unwrap();
    let call = Call::user("x");
    let (res, chunks) = tokio::time::timeout(Duration::from_secs(20), stream(&model, &call))
        .await
        .expect("pings kept a stalled stream alive");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(text_of(&chunks), "never finishes ");
}

#[tokio::test]
async fn the_call_timeout_ends_a_stream_kept_alive_by_pings() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("x y")
            .stall_after_events(4)
            .keepalive_while_stalled(Duration::from_millis(50))]);
    let cfg = config(&mock)
        .with_stream_chunk_timeout(Duration::from_secs(3600))
        .with_call_timeout(Duration::from_secs(1));
    let model = AnthropicModel::new(cfg).unwrap();
    let call = Call::user("x");
    let (res, _) = tokio::time::timeout(Duration::from_secs(20), stream(&model, &call))
        .await
        .expect("the call deadline did not end the stream");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_secs(1))
    );
}

#[tokio::test]
async fn connection_closed_before_the_stop_reason_is_a_stream_error() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("a b c").drop_after_events(4)]);
    let (res, _) = stream(&model(&mock), &Call::user("x")).await;
    assert!(matches!(res, Err(ModelError::Stream(_))), "{res:?}");
    assert!(res.unwrap_err().is_transient());
}

#[tokio::test]
async fn an_answer_cut_after_its_stop_reason_is_kept() {
    let reply = AnthropicReply::text("all done");
    let n = reply.events(MODEL).unwrap().len();
    let mock = MockAnthropic::start().await.with_replies([
        // Everything but `message_stop`, then the body ends …
        reply.clone().drop_after_events(n - 1),
        // … or stays open.
        reply.stall_after_events(n - 1),
    ]);
    let cfg = config(&mock).with_stream_chunk_timeout(Duration::from_millis(200));
    let model = AnthropicModel::new(cfg).unwrap();
    for _ in 0..2 {
        let (res, chunks) = stream(&model, &Call::user("x")).await;
        let msg = res.unwrap();
        assert_eq!(msg.content, Content::Text("all done".into()));
        assert_eq!(msg.finish_reason(), Some("stop"));
        assert_eq!(
            chunks.last().unwrap().chunk_position.as_deref(),
            Some("last")
        );
    }
}

#[tokio::test]
async fn sse_split_into_tiny_network_writes() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::blocks([
            AnthropicBlock::thinking("hmm ü", "sig"),
            AnthropicBlock::text("héllo wörld"),
            AnthropicBlock::tool_use("toolu_1", "ls", json!({"path": "/tmp/ü"})),
        ])
        .sse_fragment_size(5)
        .chunk_delay(Duration::from_millis(1))]);
    let (res, chunks) = stream(&model(&mock), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(text_of(&chunks), "héllo wörld");
    assert_eq!(reasoning_of(&chunks).concat(), "hmm ü");
    assert_eq!(
        msg.tool_calls,
        vec![ToolCall::new(
            "toolu_1",
            "ls",
            obj(json!({"path": "/tmp/ü"}))
        )]
    );
}

#[tokio::test]
async fn a_raw_stream_with_pings_and_unknown_events() {
    let body = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_raw\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-raw\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\r\n\r\n",
        ": keep-alive\n\n",
        "event: ping\ndata: {\"type\": \"ping\"}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
        "event: future_event\ndata: {\"type\":\"future_event\",\"x\":1}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::raw_body(200, body)]);
    let (res, _) = stream(&model(&mock), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(msg.content, Content::Text("hi".into()));
    assert_eq!(msg.response_metadata["model_name"], json!("claude-raw"));
    assert_eq!(msg.response_metadata["id"], json!("msg_raw"));
    assert_eq!(msg.usage_metadata, Some(UsageMetadata::new(5, 3)));
}

#[tokio::test]
async fn malformed_tool_input_becomes_an_invalid_call_and_is_replayed_once_answered() {
    let reply = || {
        AnthropicReply::blocks([
            AnthropicBlock::tool_use("toolu_ok", "ls", json!({"path": "/"})),
            AnthropicBlock::tool_use("toolu_bad", "bash", json!("{\"command\": \"ls")),
        ])
    };
    let mock = MockAnthropic::start()
        .await
        .with_replies([reply(), reply()]);
    let model = model(&mock);
    let call = Call::user("go");
    let [invoked, streamed] = both(&model, &call).await;
    for msg in [&invoked, &streamed] {
        assert_eq!(
            msg.tool_calls,
            vec![ToolCall::new("toolu_ok", "ls", obj(json!({"path": "/"})))]
        );
        let invalid: Vec<_> = msg
            .invalid_tool_calls
            .iter()
            .map(|c: &InvalidToolCall| (c.id.as_deref(), c.name.as_deref(), c.args.as_deref()))
            .collect();
        assert_eq!(
            invalid,
            vec![(Some("toolu_bad"), Some("bash"), Some("{\"command\": \"ls"))]
        );
        assert!(msg.invalid_tool_calls[0].error.is_some());
    }

    // The invalid call was answered with an error: both tool_use blocks are replayed.
    let call = call
        .then(streamed)
        .then(ToolMessage::new("toolu_ok", "a\nb"))
        .then(ToolMessage::error("toolu_bad", "Error: invalid arguments"));
    model.invoke(call.req()).await.unwrap();
    mock.assert_no_violations();
    let body = mock.last_request().unwrap().body;
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "tool_use", "id": "toolu_ok", "name": "ls", "input": {"path": "/"}},
            {"type": "tool_use", "id": "toolu_bad", "name": "bash", "input": {}},
        ])
    );
}

#[tokio::test]
async fn request_body_shape() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("fine")]);
    let mut cfg = config(&mock);
    cfg.base_url.push('/');
    cfg.temperature = Some(0.7);
    cfg.max_tokens = Some(512);
    cfg.extra = obj(json!({"top_k": 5, "model": "must-not-win", "reasoning_effort": "low"}));
    let model = AnthropicModel::new(cfg).unwrap();

    // Thinking, text and a tool_use block whose call a middleware has since removed.
    let ai = AiMessage {
        content: Content::Blocks(vec![
            json!({"type": "thinking", "thinking": "plan", "signature": "sig-1", "index": 0}),
            json!({"type": "thinking", "thinking": "unsigned, from elsewhere"}),
            json!({"type": "text", "text": "Running two.", "index": 1}),
            json!({"type": "text", "text": "  "}),
            json!({"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "stale"}}),
            json!({"type": "tool_use", "id": "toolu_gone", "name": "bash", "input": {}}),
            json!({"type": "reasoning", "summary": []}),
        ]),
        tool_calls: vec![
            ToolCall::new("toolu_1", "bash", obj(json!({"command": "ls"}))),
            ToolCall::new("toolu_2", "read_file", obj(json!({"path": "/a"}))),
        ],
        ..Default::default()
    };
    let mut named_human = Message::human(Content::Blocks(vec![
        json!("look at this"),
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
        json!({"type": "image_url", "image_url": "https://example.com/cat.jpg"}),
    ]));
    *named_human.name_mut() = Some("user-input".into());
    let call = Call {
        system: Some("You are DeerFlow.".into()),
        messages: vec![
            Arc::new(Message::system("Extra system rules.")),
            Arc::new(named_human),
            Arc::new(Message::Ai(ai)),
            Arc::new(Message::remove("gone")),
            Arc::new(ToolMessage::new("toolu_1", "a.txt\nb.txt").with_name("bash").into()),
            Arc::new(Message::human("(progress hint)")),
            Arc::new(
                ToolMessage::new(
                    "toolu_2",
                    Content::Blocks(vec![
                        json!({"type": "text", "text": "line 1"}),
                        json!("line 2"),
                        json!({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}}),
                    ]),
                )
                .into(),
            ),
            Arc::new(Message::system("Reminder: be brief.")),
            Arc::new(Message::ai("")),
            Arc::new(Message::ai("Two files.")),
            Arc::new(Message::human("thanks")),
        ],
        tools: vec![
            Arc::new(ToolSpec {
                name: "bash".into(),
                description: "Run a command".into(),
                parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
            }),
            Arc::new(ToolSpec {
                name: "read_file".into(),
                description: String::new(),
                parameters: Value::Null,
            }),
        ],
        tool_choice: Some(json!({"name": "bash"})),
        settings: obj(
            json!({"temperature": 0.1, "max_tokens": null, "parallel_tool_calls": false, "extra_body": {"stop_sequences": ["END"]}}),
        ),
    };
    model.invoke(call.req()).await.unwrap();

    let req = mock.last_request().unwrap();
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(
        req.body,
        json!({
            "model": MODEL,
            "max_tokens": 512,
            "system": "You are DeerFlow.\n\nExtra system rules.\n\nReminder: be brief.",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look at this"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                    {"type": "text", "text": "Running two."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "/a"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\nb.txt"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [
                        {"type": "text", "text": "line 1"},
                        {"type": "text", "text": "line 2"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "BBBB"}},
                    ]},
                    {"type": "text", "text": "(progress hint)"},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "Two files."}]},
                {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
            ],
            "tools": [
                {"name": "bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
                {"name": "read_file", "input_schema": {"type": "object", "properties": {}}},
            ],
            "tool_choice": {"type": "tool", "name": "bash", "disable_parallel_tool_use": true},
            "temperature": 0.1,
            "top_k": 5,
            "stop_sequences": ["END"],
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn tool_choice_mapping_and_no_tools() {
    let mock = MockAnthropic::start().await;
    let model = model(&mock);
    for (choice, expected) in [
        (json!("auto"), json!({"type": "auto"})),
        (json!("none"), json!({"type": "none"})),
        (json!("required"), json!({"type": "any"})),
        (json!("any"), json!({"type": "any"})),
        (json!("ls"), json!({"type": "tool", "name": "ls"})),
        (
            json!({"type": "function", "function": {"name": "ls"}}),
            json!({"type": "tool", "name": "ls"}),
        ),
        (json!({"type": "auto"}), json!({"type": "auto"})),
    ] {
        let call = Call {
            tools: vec![tool("ls")],
            tool_choice: Some(choice),
            ..Call::user("x")
        };
        model.invoke(call.req()).await.unwrap();
        assert_eq!(mock.last_request().unwrap().body["tool_choice"], expected);
    }
    // From settings, and nothing at all without tools.
    let call = Call {
        tools: vec![tool("ls")],
        settings: obj(json!({"tool_choice": "any"})),
        ..Call::user("x")
    };
    model.invoke(call.req()).await.unwrap();
    assert_eq!(
        mock.last_request().unwrap().body["tool_choice"],
        json!({"type": "any"})
    );
    let call = Call {
        tool_choice: Some(json!("required")),
        settings: obj(json!({"parallel_tool_calls": false})),
        ..Call::user("x")
    };
    model.invoke(call.req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert!(
        body.get("tools").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );
}

#[tokio::test]
async fn tool_use_blocks_of_cleared_calls_are_not_replayed() {
    // A safety middleware cleared the calls but the provider's blocks are still in content.
    let mock = MockAnthropic::start().await;
    let mut ai = AiMessage {
        content: Content::Blocks(vec![
            json!({"type": "text", "text": "Trying."}),
            json!({"type": "tool_use", "id": "toolu_x", "name": "bash", "input": {"command": "rm"}}),
        ]),
        tool_calls: vec![ToolCall::new(
            "toolu_x",
            "bash",
            obj(json!({"command": "rm"})),
        )],
        ..Default::default()
    };
    ai.set_tool_calls(Vec::new());
    let call = Call::user("go").then(ai).then(Message::human("and now?"));
    model(&mock).invoke(call.req()).await.unwrap();
    mock.assert_no_violations();
    assert_eq!(
        mock.last_request().unwrap().body["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Trying."}]})
    );
}

#[tokio::test]
async fn the_invariant_checker_rejects_a_broken_history() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::text("kept")]);
    let dangling = AiMessage {
        tool_calls: vec![ToolCall::new("toolu_lost", "bash", Object::new())],
        ..Default::default()
    };
    let call = Call::user("run it")
        .then(dangling)
        .then(Message::human("well?"))
        .then(Message::ai("hm"))
        .then(ToolMessage::new("toolu_unknown", "?"));
    let err = model(&mock).invoke(call.req()).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    let violations = mock.violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[0].contains("toolu_lost"));
    assert!(violations[1].contains("toolu_unknown"));
    assert_eq!(
        mock.remaining(),
        1,
        "a rejected request does not use up a reply"
    );
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mock.assert_no_violations()));
    assert!(caught.is_err());
}

#[tokio::test]
async fn fallback_answers_from_the_request() {
    let mock = MockAnthropic::start().await.with_fallback(|body| {
        let n = body["messages"].as_array().map_or(0, Vec::len);
        AnthropicReply::text(format!("{n} turns"))
    });
    let call = Call::user("a")
        .then(Message::ai("b"))
        .then(Message::human("c"));
    let msg = model(&mock).invoke(call.req()).await.unwrap();
    assert_eq!(msg.content, Content::Text("3 turns".into()));
}

#[tokio::test]
async fn connection_refused_is_connect() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = AnthropicConfig::new("m").with_base_url(format!("http://127.0.0.1:{port}"));
    let err = AnthropicModel::new(cfg)
        .unwrap()
        .invoke(Call::user("x").req())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Connect(_)), "{err:?}");
    assert!(err.is_transient());
}

#[test]
fn endpoints_bad_urls_and_redacted_keys() {
    let endpoint = |base: &str| AnthropicConfig::new("m").with_base_url(base).endpoint();
    assert_eq!(
        AnthropicConfig::new("m").endpoint(),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(
        endpoint("http://proxy:8080/"),
        "http://proxy:8080/v1/messages"
    );
    assert_eq!(
        endpoint("http://proxy:8080/v1/"),
        "http://proxy:8080/v1/messages"
    );
    assert_eq!(
        endpoint("https://gw.example/anthropic"),
        "https://gw.example/anthropic/v1/messages"
    );
    let err = AnthropicModel::new(AnthropicConfig::new("m").with_base_url("api.anthropic.com"))
        .unwrap_err();
    assert!(matches!(err, ModelError::InvalidRequest(_)), "{err:?}");
    let cfg = AnthropicConfig::new("m").with_api_key(Some("sk-ant-secret".into()));
    assert_eq!(cfg.info.provider, "anthropic");
    let model = AnthropicModel::new(cfg.clone()).unwrap();
    assert!(!format!("{cfg:?} {model:?}").contains("sk-ant-secret"));
}

#[test]
fn mock_on_its_own_thread_serves_synchronous_tests() {
    let mock =
        MockAnthropic::start_on_thread().with_replies([AnthropicReply::text("from a thread")]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let msg = rt
        .block_on(model(&mock).invoke(Call::user("x").req()))
        .unwrap();
    assert_eq!(msg.content, Content::Text("from a thread".into()));
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn dropping_the_call_future_aborts_the_request() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::hang()]);
    let model = model(&mock);
    let call = Call::user("x");
    {
        let fut = model.invoke(call.req());
        tokio::pin!(fut);
        // Drive the call until the server holds it, then drop it.
        loop {
            tokio::select! {
                biased;
                res = &mut fut => panic!("a hanging reply cannot complete: {res:?}"),
                _ = tokio::task::yield_now() => {}
            }
            if mock.in_flight() == 1 {
                break;
            }
        }
    }
    // The server notices the closed connection and drops its handler.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while mock.in_flight() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "request still in flight after drop"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let msg = model.invoke(call.req()).await.unwrap();
    assert_eq!(msg.content, Content::Text("ok".into()));
}
