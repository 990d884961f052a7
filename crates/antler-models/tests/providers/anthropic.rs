//! The Messages wire format against the Anthropic mock of `antler-test-support`: turns, content
//! blocks, thinking, tool use and stream events in Anthropic's shapes. What the driver does
//! alike for every provider is in `driver.rs`.

use std::sync::Arc;
use std::time::Duration;

use antler_models::providers::anthropic::{AnthropicConfig, AnthropicModel};
use antler_models::{ChatModel, ModelError};
use antler_protocol::{
    AiMessage, Content, InvalidToolCall, Message, ToolCall, ToolMessage, ToolSpec, UsageMetadata,
};
use antler_test_support::{AnthropicBlock, AnthropicReply, MockAnthropic};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::{
    anthropic_usage as usage, assert_fragments_rebuild, assert_no_tools, assert_post, both,
    first_leg, invoke_user, obj, path_tool as tool, reasoning_of, round_trip_results, second_leg,
    sent_body, stream, text_of, tool_call, without_provider_id, Anthropic, Call, FirstLeg, Vendor,
    MESSAGE_ID,
};

const MODEL: &str = Anthropic::MODEL;

#[tokio::test]
async fn text_reply_without_streaming() {
    let mock = MockAnthropic::start()
        .await
        .require_api_key("sk-ant-test")
        .with_replies([AnthropicReply::text("Hello there, friend.").usage(12, 4)]);
    let msg = invoke_user::<Anthropic>(&mock, "hi").await;
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
            }))
            .into(),
            id: Some(MESSAGE_ID.into()),
            usage_metadata: Some(usage(12, 4, 0, 0)),
            ..Default::default()
        }
    );

    let req = mock.last_request().unwrap();
    assert_post(&req, "/v1/messages");
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
async fn tool_use_round_trip_groups_results_and_flags_errors() {
    for streaming in [false, true] {
        let FirstLeg(mock, model, call, first, _) = first_leg::<Anthropic>(streaming).await;
        assert_eq!(first.finish_reason(), Some("tool_calls"));
        assert_eq!(first.response_metadata["stop_reason"], json!("tool_use"));
        assert_eq!(
            first.tool_calls,
            vec![
                tool_call("toolu_a", "ls", json!({"path": "/mnt"})),
                tool_call("toolu_b", "read_file", json!({"path": "/x"})),
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

        let [ok, failed] = round_trip_results(["toolu_a", "toolu_b"]);
        let results = [ok.with_name("ls"), failed.with_name("read_file")];
        let body = second_leg(&model, &mock, call, first, results).await;
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
    let model = Anthropic::model(&mock);
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
    assert!(chunks
        .iter()
        .flat_map(|c| c.tool_call_chunks.iter())
        .all(|f| matches!(f.index, Some(0 | 1))));
    assert_fragments_rebuild(&chunks, &expected);

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
        Anthropic::config(&mock)
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
    let body = sent_body(&model, &mock, &call).await;
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
        let mut cfg = Anthropic::config(&mock).with_thinking(thinking);
        cfg.wire.max_tokens = max;
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
    let mut cfg = Anthropic::config(&mock)
        .with_max_tokens(16000)
        .with_thinking(json!({"type": "enabled", "budget_tokens": 10000}));
    cfg.wire.temperature = Some(0.2);
    let model = AnthropicModel::new(cfg).unwrap();
    let call = Call {
        tools: vec![tool("ls")],
        tool_choice: Some(json!("required")),
        ..Call::user("x")
    };
    let body = sent_body(&model, &mock, &call).await;
    assert!(
        body.get("temperature").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );

    // Disabled: sent as is; temperature kept; a per-call max_tokens below the budget is refused.
    let mut cfg = Anthropic::config(&mock).with_thinking(json!({"type": "disabled"}));
    cfg.wire.temperature = Some(0.2);
    let model = AnthropicModel::new(cfg).unwrap();
    model.invoke(Call::user("x").req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert_eq!(body["thinking"], json!({"type": "disabled"}));
    assert_eq!(body["temperature"], json!(0.2));

    let model = AnthropicModel::new(
        Anthropic::config(&mock).with_thinking(json!({"type": "enabled", "budget_tokens": 2048})),
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
    let model = Anthropic::model(&mock);
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
    let model = Anthropic::model(&mock);
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
async fn undecodable_stream_events_are_decode_errors() {
    let mock = MockAnthropic::start()
        .await
        .with_replies([AnthropicReply::raw_body(
            200,
            "event: message_start\ndata: {not json\n\n",
        )]);
    let (res, _) = stream(&Anthropic::model(&mock), &Call::user("x")).await;
    assert!(matches!(res, Err(ModelError::Decode(_))), "{res:?}");
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
    let (res, chunks) = stream(&Anthropic::model(&mock), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(text_of(&chunks), "héllo wörld");
    assert_eq!(reasoning_of(&chunks).concat(), "hmm ü");
    assert_eq!(
        msg.tool_calls,
        vec![tool_call("toolu_1", "ls", json!({"path": "/tmp/ü"}))]
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
    let (res, _) = stream(&Anthropic::model(&mock), &Call::user("x")).await;
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
    let model = Anthropic::model(&mock);
    let call = Call::user("go");
    let [invoked, streamed] = both(&model, &call).await;
    for msg in [&invoked, &streamed] {
        assert_eq!(
            msg.tool_calls,
            vec![tool_call("toolu_ok", "ls", json!({"path": "/"}))]
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
    let mut cfg = Anthropic::config(&mock);
    cfg.base_url.push('/');
    cfg.wire.temperature = Some(0.7);
    cfg.wire.max_tokens = Some(512);
    cfg.wire.extra = obj(json!({"top_k": 5, "model": "must-not-win", "reasoning_effort": "low"}));
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
            tool_call("toolu_1", "bash", json!({"command": "ls"})),
            tool_call("toolu_2", "read_file", json!({"path": "/a"})),
        ]
        .into(),
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
    let model = Anthropic::model(&mock);
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
    let body = sent_body(&model, &mock, &call).await;
    assert_no_tools(&body);
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
        tool_calls: vec![tool_call("toolu_x", "bash", json!({"command": "rm"}))].into(),
        ..Default::default()
    };
    ai.set_tool_calls(Vec::new());
    let call = Call::user("go").then(ai).then(Message::human("and now?"));
    Anthropic::model(&mock).invoke(call.req()).await.unwrap();
    mock.assert_no_violations();
    assert_eq!(
        mock.last_request().unwrap().body["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Trying."}]})
    );
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
    let msg = Anthropic::model(&mock).invoke(call.req()).await.unwrap();
    assert_eq!(msg.content, Content::Text("3 turns".into()));
}

#[test]
fn endpoints_and_provider() {
    let endpoint = |base: &str| AnthropicConfig::new("m").with_base_url(base).endpoint();
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
    assert_eq!(AnthropicConfig::new("m").info.provider, "anthropic");
}
