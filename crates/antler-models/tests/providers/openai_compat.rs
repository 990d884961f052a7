//! The Chat Completions wire format against the OpenAI mock of `antler-test-support`: the
//! request body, answers and stream chunks in OpenAI's shapes. What the driver does alike for
//! every provider is in `driver.rs`.

use std::sync::Arc;
use std::time::Duration;

use antler_models::providers::openai_compat::{OpenAiCompatConfig, OpenAiCompatModel};
use antler_models::ChatModel;
use antler_protocol::{
    AiMessage, Content, InvalidToolCall, Message, Object, ToolCall, ToolMessage, ToolSpec,
};
use antler_test_support::{MockOpenAi, MockReply, MockToolCall};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::common::{
    assert_fragments_rebuild, assert_no_tools, invoke_user, obj, openai_usage as usage, sent_body,
    stream, text_of, tool_call, without_provider_id, Call, OpenAi, Vendor, MESSAGE_ID,
};

/// A mock that answers `text` once, and a config for it to adjust.
async fn text_mock(text: &str) -> (MockOpenAi, OpenAiCompatConfig) {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text(text)]);
    let cfg = OpenAi::config(&mock);
    (mock, cfg)
}

#[tokio::test]
async fn text_reply_without_streaming() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("Hello there, friend.").usage(12, 4)]);
    let msg = invoke_user::<OpenAi>(&mock, "hi").await;
    assert_eq!(
        msg,
        AiMessage {
            content: "Hello there, friend.".into(),
            response_metadata: obj(json!({
                "finish_reason": "stop",
                "model_name": "gpt-test",
                "id": "chatcmpl-mock-1",
                "system_fingerprint": "fp_mock",
            }))
            .into(),
            id: Some(MESSAGE_ID.into()),
            usage_metadata: Some(usage(12, 4, 0, 0)),
            ..Default::default()
        }
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn parallel_tool_calls_are_reassembled_by_index() {
    let calls = || {
        [
            MockToolCall::new(
                "call_a",
                "bash",
                json!({"command": "ls -la /mnt/user-data"}),
            ),
            MockToolCall::new(
                "call_b",
                "read_file",
                json!({"path": "/mnt/a.txt", "limit": 20}),
            ),
        ]
    };
    let mock = MockOpenAi::start().await.with_replies([
        MockReply::text_and_tool_calls("Let me look.", calls()),
        MockReply::text_and_tool_calls("Let me look.", calls()),
    ]);
    let model = OpenAi::model(&mock);
    let call = Call::user("look around");
    let (res, chunks) = stream(&model, &call).await;
    let msg = res.unwrap();

    let expected_calls = vec![
        tool_call(
            "call_a",
            "bash",
            json!({"command": "ls -la /mnt/user-data"}),
        ),
        tool_call(
            "call_b",
            "read_file",
            json!({"path": "/mnt/a.txt", "limit": 20}),
        ),
    ];
    assert_eq!(msg.tool_calls, expected_calls);
    assert_eq!(msg.content, Content::Text("Let me look.".into()));
    assert_eq!(msg.finish_reason(), Some("tool_calls"));
    assert_eq!(
        msg.additional_kwargs["tool_calls"],
        json!([
            {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls -la /mnt/user-data\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"/mnt/a.txt\",\"limit\":20}"}},
        ])
    );

    // Fragments: the first of each index names the call, later ones carry only arguments.
    let expected_args: Vec<Value> = expected_calls
        .iter()
        .map(|c| Value::Object(c.args.clone()))
        .collect();
    assert_fragments_rebuild(&chunks, &expected_args);

    let unstreamed = model.invoke(call.req()).await.unwrap();
    assert_eq!(without_provider_id(unstreamed), without_provider_id(msg));
}

#[tokio::test]
async fn reasoning_content_is_kept_streamed_and_not() {
    let mock = MockOpenAi::start().await.with_replies([
        MockReply::reasoning("First, think hard.", "42")
            .reasoning_tokens(7)
            .usage(20, 10),
        MockReply::reasoning("First, think hard.", "42")
            .reasoning_tokens(7)
            .usage(20, 10),
    ]);
    let model = OpenAi::model(&mock);
    let call = Call::user("meaning?");
    let msg = model.invoke(call.req()).await.unwrap();
    assert_eq!(
        msg.additional_kwargs,
        obj(json!({"reasoning_content": "First, think hard."}))
    );
    assert_eq!(msg.content, Content::Text("42".into()));
    assert_eq!(msg.usage_metadata, Some(usage(20, 10, 0, 7)));

    let (res, chunks) = stream(&model, &call).await;
    let streamed = res.unwrap();
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| {
            c.additional_kwargs
                .get("reasoning_content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(reasoning, "First, think hard.");
    assert!(
        chunks
            .iter()
            .filter(|c| c.additional_kwargs.contains_key("reasoning_content"))
            .count()
            > 1
    );
    assert_eq!(without_provider_id(streamed), without_provider_id(msg));
}

#[tokio::test]
async fn usage_details_from_the_final_usage_chunk() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("cached")
            .usage(1000, 50)
            .cached_tokens(768)
            .reasoning_tokens(3)]);
    let (res, chunks) = stream(&OpenAi::model(&mock), &Call::user("x")).await;
    let expected = usage(1000, 50, 768, 3);
    assert_eq!(res.unwrap().usage_metadata, Some(expected.clone()));
    assert_eq!(chunks.last().unwrap().usage_metadata, Some(expected));
}

#[tokio::test]
async fn stream_without_usage_when_disabled() {
    let (mock, mut cfg) = text_mock("x").await;
    cfg.wire.stream_usage = false;
    let (res, _) = stream(&OpenAiCompatModel::new(cfg).unwrap(), &Call::user("x")).await;
    assert_eq!(res.unwrap().usage_metadata, None);
    assert!(mock.requests()[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn raw_provider_tool_calls_are_kept_verbatim() {
    let reply = MockReply::tool_call("call_9", "web_search", json!({"query": "rust sse"}));
    let raw =
        reply.chat_completion("gpt-test").unwrap()["choices"][0]["message"]["tool_calls"].clone();
    let mock = MockOpenAi::start().await.with_replies([reply]);
    let msg = invoke_user::<OpenAi>(&mock, "search").await;
    assert_eq!(msg.additional_kwargs["tool_calls"], raw);
    assert_eq!(msg.content, Content::Text(String::new()));
    assert_eq!(
        msg.tool_calls,
        vec![tool_call(
            "call_9",
            "web_search",
            json!({"query": "rust sse"})
        )]
    );
}

#[tokio::test]
async fn malformed_arguments_become_invalid_tool_calls() {
    let calls = || {
        [
            MockToolCall::new("call_ok", "ls", json!({"path": "/"})),
            MockToolCall::new("call_bad", "bash", json!("{\"command\": \"ls")),
            MockToolCall::new("call_arr", "bash", json!("[1, 2]")),
            MockToolCall::new("call_empty", "now", json!("")),
        ]
    };
    let mock = MockOpenAi::start().await.with_replies([
        MockReply::tool_calls(calls()),
        MockReply::tool_calls(calls()),
    ]);
    let model = OpenAi::model(&mock);
    let call = Call::user("go");
    for msg in [
        model.invoke(call.req()).await.unwrap(),
        stream(&model, &call).await.0.unwrap(),
    ] {
        assert_eq!(
            msg.tool_calls,
            vec![
                tool_call("call_ok", "ls", json!({"path": "/"})),
                ToolCall::new("call_empty", "now", Object::new()),
            ]
        );
        let invalid: Vec<(Option<&str>, Option<&str>, Option<&str>)> = msg
            .invalid_tool_calls
            .iter()
            .map(|c| (c.id.as_deref(), c.name.as_deref(), c.args.as_deref()))
            .collect();
        assert_eq!(
            invalid,
            vec![
                (Some("call_bad"), Some("bash"), Some("{\"command\": \"ls")),
                (Some("call_arr"), Some("bash"), Some("[1, 2]")),
            ]
        );
        assert!(msg
            .invalid_tool_calls
            .iter()
            .all(|c: &InvalidToolCall| c.error.is_some()));
        assert_eq!(
            msg.additional_kwargs["tool_calls"]
                .as_array()
                .unwrap()
                .len(),
            4
        );
    }
}

#[tokio::test]
async fn a_missing_tool_call_id_is_generated_and_patched_into_the_raw_copy() {
    let reply = || MockReply::tool_calls([MockToolCall::without_id("ls", json!({"path": "/"}))]);
    let mock = MockOpenAi::start().await.with_replies([reply(), reply()]);
    let model = OpenAi::model(&mock);
    let call = Call::user("go");
    for msg in [
        model.invoke(call.req()).await.unwrap(),
        stream(&model, &call).await.0.unwrap(),
    ] {
        let id = msg.tool_calls[0].id.clone().unwrap();
        assert!(id.starts_with("call_") && id.len() == 5 + 32, "{id}");
        assert_eq!(msg.additional_kwargs["tool_calls"][0]["id"], json!(id));
    }
}

#[tokio::test]
async fn request_body_shape() {
    let (mock, mut cfg) = text_mock("fine").await;
    cfg.base_url.push('/');
    cfg.wire.temperature = Some(0.7);
    cfg.wire.max_tokens = Some(512);
    cfg.wire.reasoning_effort = Some("low".into());
    cfg.wire.extra = obj(json!({"top_p": 0.9, "model": "must-not-win"}));
    cfg.wire.extra_body = obj(json!({"thinking": {"type": "enabled"}}));
    cfg.wire.replay_reasoning_content = true;
    let model = OpenAiCompatModel::new(cfg).unwrap();

    let mut ai = AiMessage {
        content: "".into(),
        tool_calls: vec![
            tool_call("call_1", "bash", json!({"command": "ls"})),
            tool_call("call_2", "read_file", json!({"path": "/a"})),
        ]
        .into(),
        ..Default::default()
    };
    ai.additional_kwargs
        .insert("reasoning_content".into(), json!("I should list files."));
    let mut named_human = Message::human(Content::Blocks(vec![
        json!("look at this"),
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
    ]));
    *named_human.name_mut() = Some("user-input".into());
    let call = Call {
        system: Some("You are DeerFlow.".into()),
        messages: vec![
            Arc::new(named_human),
            Arc::new(Message::Ai(ai)),
            Arc::new(
                ToolMessage::new("call_1", "a.txt\nb.txt")
                    .with_name("bash")
                    .into(),
            ),
            Arc::new(
                ToolMessage::new(
                    "call_2",
                    Content::Blocks(vec![
                        json!({"type": "text", "text": "line 1"}),
                        json!("line 2"),
                    ]),
                )
                .into(),
            ),
            Arc::new(Message::remove("gone")),
            Arc::new(Message::system("Reminder: be brief.")),
            Arc::new(Message::ai("Two files.")),
            Arc::new(Message::human("thanks")),
        ],
        tools: vec![Arc::new(ToolSpec {
            name: "bash".into(),
            description: "Run a command".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        })],
        tool_choice: Some(json!({"name": "bash"})),
        settings: obj(json!({"temperature": 0.1, "max_tokens": null, "extra_body": {"seed": 7}})),
    };
    model.invoke(call.req()).await.unwrap();

    let requests = mock.requests();
    let req = &requests[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(
        req.body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "You are DeerFlow."},
                {"role": "user", "content": [
                    {"type": "text", "text": "look at this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ], "name": "user-input"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"/a\"}"}},
                ], "reasoning_content": "I should list files."},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt", "name": "bash"},
                {"role": "tool", "tool_call_id": "call_2", "content": "line 1\nline 2"},
                {"role": "system", "content": "Reminder: be brief."},
                {"role": "assistant", "content": "Two files."},
                {"role": "user", "content": "thanks"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "bash",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
            }}],
            "tool_choice": {"type": "function", "function": {"name": "bash"}},
            "temperature": 0.1,
            "max_tokens": 512,
            "reasoning_effort": "low",
            "top_p": 0.9,
            "thinking": {"type": "enabled"},
            "seed": 7,
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn a_long_system_prompt_is_sent_exactly_on_every_call() {
    // Long prompts' encodings are remembered by content: each call must still carry its own.
    let mock = MockOpenAi::start().await;
    let model = OpenAi::model(&mock);
    let base = "You are \"DeerFlow\" — a super agent.\n\t<rules>\\ be brief </rules>\u{1F98C}\n"
        .repeat(20);
    let edited = format!("{base}One more rule.");
    let prompts = [base.clone(), base.clone(), edited, base];
    for prompt in &prompts {
        let call = Call {
            system: Some(prompt.clone()),
            messages: vec![Arc::new(Message::human("hi"))],
            tools: vec![],
            tool_choice: None,
            settings: Object::new(),
        };
        model.invoke(call.req()).await.unwrap();
    }
    let sent: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body["messages"][0].clone())
        .collect();
    let expected: Vec<Value> = prompts
        .iter()
        .map(|p| json!({"role": "system", "content": p}))
        .collect();
    assert_eq!(sent, expected);
    mock.assert_no_violations();
}

#[tokio::test]
async fn tool_choice_strings_and_no_tools() {
    let mock = MockOpenAi::start().await;
    let model = OpenAi::model(&mock);
    let tool = Arc::new(ToolSpec {
        name: "ls".into(),
        description: String::new(),
        parameters: Value::Null,
    });
    for (choice, expected) in [
        (json!("auto"), json!("auto")),
        (json!("any"), json!("required")),
        (
            json!("ls"),
            json!({"type": "function", "function": {"name": "ls"}}),
        ),
    ] {
        let call = Call {
            tools: vec![tool.clone()],
            tool_choice: Some(choice),
            ..Call::user("x")
        };
        let body = sent_body(&model, &mock, &call).await;
        assert_eq!(body["tool_choice"], expected);
        assert_eq!(
            body["tools"][0]["function"]["parameters"],
            json!({"type": "object", "properties": {}})
        );
    }
    // Without tools neither `tools` nor `tool_choice` is sent.
    let call = Call {
        tool_choice: Some(json!("required")),
        ..Call::user("x")
    };
    let body = sent_body(&model, &mock, &call).await;
    assert_no_tools(&body);
}

#[tokio::test]
async fn a_stream_ending_after_finish_reason_without_done_is_complete() {
    let body = concat!(
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    );
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::raw_body(200, body)]);
    let (res, _) = stream(&OpenAi::model(&mock), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(msg.content, Content::Text("hi".into()));
    assert_eq!(msg.finish_reason(), Some("stop"));
    assert_eq!(msg.response_metadata["model_name"], json!("m"));
}

#[tokio::test]
async fn sse_split_into_tiny_network_writes() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text_and_tool_calls(
            "héllo wörld",
            [MockToolCall::new("call_1", "ls", json!({"path": "/tmp/ü"}))],
        )
        .sse_fragment_size(5)
        .chunk_delay(Duration::from_millis(1))]);
    let (res, chunks) = stream(&OpenAi::model(&mock), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(msg.content, Content::Text("héllo wörld".into()));
    assert_eq!(text_of(&chunks), "héllo wörld");
    assert_eq!(
        msg.tool_calls,
        vec![tool_call("call_1", "ls", json!({"path": "/tmp/ü"}))]
    );
}

#[tokio::test]
async fn invalid_tool_calls_are_replayed_only_when_answered() {
    let mock = MockOpenAi::start().await;
    let model = OpenAi::model(&mock);
    let invalid = |id: &str| InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: Some(id.into()),
        name: Some("bash".into()),
        args: Some("{oops".into()),
        error: Some("bad json".into()),
    };
    let ai = AiMessage {
        invalid_tool_calls: vec![invalid("call_answered"), invalid("call_ignored")].into(),
        ..Default::default()
    };
    let call = Call {
        messages: vec![
            Arc::new(Message::human("go")),
            Arc::new(ai.into()),
            Arc::new(ToolMessage::error("call_answered", "Error: invalid arguments").into()),
        ],
        ..Call::user("x")
    };
    model.invoke(call.req()).await.unwrap();
    mock.assert_no_violations();
    let body = mock.last_request().unwrap().body;
    assert_eq!(
        body["messages"][2]["tool_calls"],
        json!([{"id": "call_answered", "type": "function", "function": {"name": "bash", "arguments": "{oops"}}])
    );
}

#[tokio::test]
async fn fallback_generates_long_conversations() {
    let mock = MockOpenAi::start().await.with_fallback(|body| {
        let n = body["messages"].as_array().map_or(0, Vec::len);
        MockReply::text(format!("{n} messages"))
    });
    let msg = invoke_user::<OpenAi>(&mock, "x").await;
    assert_eq!(msg.content, Content::Text("2 messages".into()));
}

#[tokio::test]
async fn tool_choice_from_settings_is_mapped_too() {
    let mock = MockOpenAi::start().await;
    let call = Call {
        tools: vec![Arc::new(ToolSpec {
            name: "ls".into(),
            description: "list".into(),
            parameters: json!({"type": "object"}),
        })],
        settings: obj(json!({"tool_choice": {"name": "ls"}, "parallel_tool_calls": false})),
        ..Call::user("x")
    };
    OpenAi::model(&mock).invoke(call.req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "ls"}})
    );
    assert_eq!(body["parallel_tool_calls"], json!(false));
}

#[tokio::test]
async fn a_stream_asks_for_the_usage_chunk() {
    let mock = MockOpenAi::start().await;
    let (res, _) = stream(&OpenAi::model(&mock), &Call::user("x")).await;
    res.unwrap();
    let body = &mock.requests()[0].body;
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}
