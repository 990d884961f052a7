//! The OpenAI-compatible adapter against the mock server of `antler-test-support`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use antler_models::providers::openai_compat::{OpenAiCompatConfig, OpenAiCompatModel};
use antler_models::{ChatModel, ChatRequest, ModelError};
use antler_protocol::{
    AiMessage, AiMessageChunk, Content, InvalidToolCall, Message, Object, ToolCall, ToolMessage,
    ToolSpec, UsageMetadata,
};
use antler_test_support::{openai_error, MockOpenAi, MockReply, MockToolCall};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const MESSAGE_ID: &str = "lc_run--test-1";

fn config(mock: &MockOpenAi) -> OpenAiCompatConfig {
    OpenAiCompatConfig::new("gpt-test")
        .with_base_url(mock.base_url())
        .with_api_key(Some("sk-test".into()))
}

fn model(mock: &MockOpenAi) -> OpenAiCompatModel {
    OpenAiCompatModel::new(config(mock)).unwrap()
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

async fn stream(
    model: &OpenAiCompatModel,
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

fn usage(input: u64, output: u64, cached: u64, reasoning: u64) -> UsageMetadata {
    UsageMetadata {
        input_token_details: Some(obj(json!({"audio": 0, "cache_read": cached}))),
        output_token_details: Some(obj(json!({"audio": 0, "reasoning": reasoning}))),
        ..UsageMetadata::new(input, output)
    }
}

fn without_provider_id(mut m: AiMessage) -> AiMessage {
    m.response_metadata.remove("id");
    m
}

#[tokio::test]
async fn text_reply_without_streaming() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("Hello there, friend.").usage(12, 4)]);
    let msg = model(&mock).invoke(Call::user("hi").req()).await.unwrap();
    assert_eq!(
        msg,
        AiMessage {
            content: "Hello there, friend.".into(),
            response_metadata: obj(json!({
                "finish_reason": "stop",
                "model_name": "gpt-test",
                "id": "chatcmpl-mock-1",
                "system_fingerprint": "fp_mock",
            })),
            id: Some(MESSAGE_ID.into()),
            usage_metadata: Some(usage(12, 4, 0, 0)),
            ..Default::default()
        }
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn streamed_text_concatenates_to_the_final_message() {
    let mock = MockOpenAi::start().await.with_replies([
        MockReply::text("one two three four").usage(9, 5),
        MockReply::text("one two three four").usage(9, 5),
    ]);
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
    assert_eq!(msg.usage_metadata, Some(usage(9, 5, 0, 0)));

    // The request asked for a stream with usage.
    let body = &mock.requests()[0].body;
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));

    // The same answer unstreamed folds into the same message.
    let unstreamed = model.invoke(call.req()).await.unwrap();
    assert_eq!(without_provider_id(unstreamed), without_provider_id(msg));
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
    let model = model(&mock);
    let call = Call::user("look around");
    let (res, chunks) = stream(&model, &call).await;
    let msg = res.unwrap();

    let expected_calls = vec![
        ToolCall::new(
            "call_a",
            "bash",
            obj(json!({"command": "ls -la /mnt/user-data"})),
        ),
        ToolCall::new(
            "call_b",
            "read_file",
            obj(json!({"path": "/mnt/a.txt", "limit": 20})),
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
    let fragments: Vec<_> = chunks
        .iter()
        .flat_map(|c| c.tool_call_chunks.iter())
        .collect();
    for index in [0, 1] {
        let of_call: Vec<_> = fragments
            .iter()
            .filter(|f| f.index == Some(index))
            .collect();
        assert!(of_call.len() >= 3, "arguments split into several fragments");
        assert!(of_call[0].id.is_some() && of_call[0].name.is_some());
        assert!(of_call[1..]
            .iter()
            .all(|f| f.id.is_none() && f.name.is_none()));
        let args: String = of_call.iter().filter_map(|f| f.args.as_deref()).collect();
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(
            Value::Object(expected_calls[index as usize].args.clone()),
            parsed
        );
    }

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
    let model = model(&mock);
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
    let (res, chunks) = stream(&model(&mock), &Call::user("x")).await;
    let expected = usage(1000, 50, 768, 3);
    assert_eq!(res.unwrap().usage_metadata, Some(expected.clone()));
    assert_eq!(chunks.last().unwrap().usage_metadata, Some(expected));
}

#[tokio::test]
async fn stream_without_usage_when_disabled() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("x")]);
    let mut cfg = config(&mock);
    cfg.stream_usage = false;
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
    let msg = model(&mock)
        .invoke(Call::user("search").req())
        .await
        .unwrap();
    assert_eq!(msg.additional_kwargs["tool_calls"], raw);
    assert_eq!(msg.content, Content::Text(String::new()));
    assert_eq!(
        msg.tool_calls,
        vec![ToolCall::new(
            "call_9",
            "web_search",
            obj(json!({"query": "rust sse"}))
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
    let model = model(&mock);
    let call = Call::user("go");
    for msg in [
        model.invoke(call.req()).await.unwrap(),
        stream(&model, &call).await.0.unwrap(),
    ] {
        assert_eq!(
            msg.tool_calls,
            vec![
                ToolCall::new("call_ok", "ls", obj(json!({"path": "/"}))),
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
    let model = model(&mock);
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
async fn undecodable_success_bodies_are_decode_errors() {
    let mock = MockOpenAi::start().await.with_replies([
        MockReply::raw_body(200, "{not json"),
        MockReply::raw_body(200, r#"{"id":"x","object":"chat.completion"}"#),
        MockReply::raw_body(200, r#"{"choices":[]}"#),
        MockReply::raw_body(200, r#"{"error":{"message":"upstream overloaded"}}"#),
    ]);
    let model = model(&mock);
    let call = Call::user("x");
    for expected in [
        "not a chat completion",
        "no choices",
        "no choices",
        "upstream overloaded",
    ] {
        match model.invoke(call.req()).await {
            Err(ModelError::Decode(msg)) => assert!(msg.contains(expected), "{msg}"),
            other => panic!("expected Decode, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let limited = || {
        MockReply::error(
            429,
            openai_error(
                "Rate limit reached for gpt-test",
                "requests",
                Some("rate_limit_exceeded"),
            ),
        )
        .retry_after(7)
    };
    let mock = MockOpenAi::start()
        .await
        .with_replies([limited(), limited()]);
    let model = model(&mock);
    let call = Call::user("x");
    for err in [
        model.invoke(call.req()).await.unwrap_err(),
        stream(&model, &call).await.0.unwrap_err(),
    ] {
        let ModelError::Http {
            status,
            retry_after,
            message,
            code,
            body,
        } = &err
        else {
            panic!("expected Http, got {err:?}")
        };
        assert_eq!(*status, 429);
        assert_eq!(*retry_after, Some(Duration::from_secs(7)));
        assert_eq!(message, "Rate limit reached for gpt-test");
        assert_eq!(code.as_deref(), Some("rate_limit_exceeded"));
        assert!(body.contains("rate_limit_exceeded"));
        assert!(err.is_transient());
    }
}

#[tokio::test]
async fn wrong_api_key_is_a_401_with_message_and_code() {
    let mock = MockOpenAi::start().await.require_api_key("sk-right");
    let err = model(&mock)
        .invoke(Call::user("x").req())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(401));
    let ModelError::Http { message, code, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with("Incorrect API key provided"),
        "{message}"
    );
    assert_eq!(code.as_deref(), Some("invalid_api_key"));
    assert!(!err.is_transient());

    let mut cfg = config(&mock);
    cfg.api_key = Some("sk-right".into());
    let ok = OpenAiCompatModel::new(cfg)
        .unwrap()
        .invoke(Call::user("x").req())
        .await
        .unwrap();
    assert_eq!(ok.content, Content::Text("ok".into()));
}

#[tokio::test]
async fn request_body_shape() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("fine")]);
    let mut cfg = config(&mock);
    cfg.base_url.push('/');
    cfg.temperature = Some(0.7);
    cfg.max_tokens = Some(512);
    cfg.reasoning_effort = Some("low".into());
    cfg.extra = obj(json!({"top_p": 0.9, "model": "must-not-win"}));
    cfg.extra_body = obj(json!({"thinking": {"type": "enabled"}}));
    cfg.replay_reasoning_content = true;
    let model = OpenAiCompatModel::new(cfg).unwrap();

    let mut ai = AiMessage {
        content: "".into(),
        tool_calls: vec![
            ToolCall::new("call_1", "bash", obj(json!({"command": "ls"}))),
            ToolCall::new("call_2", "read_file", obj(json!({"path": "/a"}))),
        ],
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
async fn tool_choice_strings_and_no_tools() {
    let mock = MockOpenAi::start().await;
    let model = model(&mock);
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
        model.invoke(call.req()).await.unwrap();
        let body = mock.last_request().unwrap().body;
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
    model.invoke(call.req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert!(
        body.get("tools").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );
}

#[tokio::test]
async fn hang_hits_the_request_timeout() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::hang(), MockReply::hang()]);
    let cfg = config(&mock).with_request_timeout(Duration::from_millis(300));
    let model = OpenAiCompatModel::new(cfg).unwrap();
    let call = Call::user("x");
    assert_eq!(
        model.invoke(call.req()).await.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    // A stream waits `request_timeout` for the response head too.
    assert_eq!(
        stream(&model, &call).await.0.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
}

#[tokio::test]
async fn stream_gap_hits_the_chunk_timeout() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("never finishes this").stall_after_chunks(3)]);
    let cfg = config(&mock).with_stream_chunk_timeout(Duration::from_millis(300));
    let (res, chunks) = stream(&OpenAiCompatModel::new(cfg).unwrap(), &Call::user("x")).await;
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(
        text_of(&chunks),
        "never finishes ",
        "deltas before the stall were forwarded"
    );
}

/// Generous bound on tests that would hang if a limit did not fire.
const NEVER: Duration = Duration::from_secs(20);

#[tokio::test]
async fn keepalive_comments_do_not_reset_the_chunk_timeout() {
    // Three events, then a `: ping` comment every 50 ms and nothing else.
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("never finishes this")
            .stall_after_chunks(3)
            .keepalive_while_stalled(Duration::from_millis(50))]);
    let cfg = config(&mock).with_stream_chunk_timeout(Duration::from_millis(300));
    let model = OpenAiCompatModel::new(cfg).unwrap();
    let call = Call::user("x");
    let (res, chunks) = tokio::time::timeout(NEVER, stream(&model, &call))
        .await
        .expect("comments kept a stalled stream alive");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
    assert_eq!(text_of(&chunks), "never finishes ");
}

#[tokio::test]
async fn the_call_timeout_ends_a_stream_kept_alive_by_comments() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("x y")
            .stall_after_chunks(2)
            .keepalive_while_stalled(Duration::from_millis(50))]);
    // The stall detector alone would never fire here: only the call deadline can.
    let cfg = config(&mock)
        .with_stream_chunk_timeout(Duration::from_secs(3600))
        .with_call_timeout(Duration::from_secs(1));
    let model = OpenAiCompatModel::new(cfg).unwrap();
    let call = Call::user("x");
    let (res, _) = tokio::time::timeout(NEVER, stream(&model, &call))
        .await
        .expect("the call deadline did not end the stream");
    let err = res.unwrap_err();
    assert_eq!(err, ModelError::Timeout(Duration::from_secs(1)));
    assert!(err.is_transient());
}

#[tokio::test]
async fn the_call_timeout_ends_a_stream_that_trickles_real_events() {
    // Every event arrives well within the chunk timeout, but the whole answer takes ~4 s.
    let words = "w ".repeat(40);
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text(words).chunk_delay(Duration::from_millis(100))]);
    let cfg = config(&mock)
        .with_stream_chunk_timeout(Duration::from_secs(3600))
        .with_call_timeout(Duration::from_millis(700));
    let model = OpenAiCompatModel::new(cfg).unwrap();
    let call = Call::user("x");
    let (res, chunks) = tokio::time::timeout(NEVER, stream(&model, &call))
        .await
        .expect("the call deadline did not end the stream");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(700))
    );
    assert!(
        !chunks.is_empty(),
        "deltas before the deadline were forwarded"
    );
}

#[tokio::test]
async fn the_call_timeout_bounds_a_non_streaming_call() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("late").delay(Duration::from_secs(30))]);
    let cfg = config(&mock).with_call_timeout(Duration::from_millis(300));
    let model = OpenAiCompatModel::new(cfg).unwrap();
    let call = Call::user("x");
    let res = tokio::time::timeout(NEVER, model.invoke(call.req()))
        .await
        .expect("the call deadline did not end the request");
    assert_eq!(
        res.unwrap_err(),
        ModelError::Timeout(Duration::from_millis(300))
    );
}

#[tokio::test]
async fn error_event_mid_stream() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("a b c").error_after_chunks(
            2,
            json!({"message": "upstream died", "type": "server_error"}),
        )]);
    let (res, _) = stream(&model(&mock), &Call::user("x")).await;
    match res {
        Err(ModelError::Stream(msg)) => assert!(msg.contains("upstream died"), "{msg}"),
        other => panic!("expected Stream, got {other:?}"),
    }
}

#[tokio::test]
async fn connection_closed_before_done() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("a b c").drop_after_chunks(2)]);
    let (res, _) = stream(&model(&mock), &Call::user("x")).await;
    assert!(matches!(res, Err(ModelError::Stream(_))), "{res:?}");
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
    let (res, _) = stream(&model(&mock), &Call::user("x")).await;
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
    let (res, chunks) = stream(&model(&mock), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(msg.content, Content::Text("héllo wörld".into()));
    assert_eq!(text_of(&chunks), "héllo wörld");
    assert_eq!(
        msg.tool_calls,
        vec![ToolCall::new(
            "call_1",
            "ls",
            obj(json!({"path": "/tmp/ü"}))
        )]
    );
}

#[tokio::test]
async fn the_invariant_checker_rejects_a_broken_history() {
    let mock = MockOpenAi::start()
        .await
        .with_replies([MockReply::text("kept")]);
    let model = model(&mock);
    let dangling = AiMessage {
        tool_calls: vec![ToolCall::new("call_lost", "bash", Object::new())],
        ..Default::default()
    };
    let call = Call {
        messages: vec![
            Arc::new(Message::human("run it")),
            Arc::new(dangling.into()),
            Arc::new(Message::human("well?")),
            Arc::new(ToolMessage::new("call_unknown", "?").into()),
        ],
        ..Call::user("x")
    };
    let err = model.invoke(call.req()).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    let violations = mock.violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[0].contains("call_unknown") || violations[1].contains("call_unknown"));
    assert!(violations.iter().any(|v| v.contains("call_lost")));
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
async fn invalid_tool_calls_are_replayed_only_when_answered() {
    let mock = MockOpenAi::start().await;
    let model = model(&mock);
    let invalid = |id: &str| InvalidToolCall {
        kind: "invalid_tool_call".into(),
        id: Some(id.into()),
        name: Some("bash".into()),
        args: Some("{oops".into()),
        error: Some("bad json".into()),
    };
    let ai = AiMessage {
        invalid_tool_calls: vec![invalid("call_answered"), invalid("call_ignored")],
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
    let msg = model(&mock).invoke(Call::user("x").req()).await.unwrap();
    assert_eq!(msg.content, Content::Text("2 messages".into()));
}

#[tokio::test]
async fn connection_refused_is_connect() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = OpenAiCompatConfig::new("m").with_base_url(format!("http://127.0.0.1:{port}/v1"));
    let err = OpenAiCompatModel::new(cfg)
        .unwrap()
        .invoke(Call::user("x").req())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Connect(_)), "{err:?}");
    assert!(err.is_transient());
}

#[test]
fn bad_base_url_is_rejected_and_debug_hides_the_key() {
    let err = OpenAiCompatModel::new(OpenAiCompatConfig::new("m").with_base_url("api.openai.com"))
        .unwrap_err();
    assert!(matches!(err, ModelError::InvalidRequest(_)), "{err:?}");
    let cfg = OpenAiCompatConfig::new("m").with_api_key(Some("sk-secret".into()));
    assert!(!format!("{cfg:?}").contains("sk-secret"));
    assert_eq!(cfg.endpoint(), "https://api.openai.com/v1/chat/completions");
}

#[test]
fn mock_on_its_own_thread_serves_synchronous_tests() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::text("from a thread")]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let msg = rt
        .block_on(model(&mock).invoke(Call::user("x").req()))
        .unwrap();
    assert_eq!(msg.content, Content::Text("from a thread".into()));
    assert_eq!(mock.request_count(), 1);
    drop(mock);
}

#[tokio::test]
async fn dropping_the_call_future_aborts_the_request() {
    let mock = MockOpenAi::start().await.with_replies([MockReply::hang()]);
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
    // The model is still usable afterwards.
    let msg = model.invoke(call.req()).await.unwrap();
    assert_eq!(msg.content, Content::Text("ok".into()));
}

#[tokio::test]
async fn a_stall_after_the_finish_reason_keeps_the_answer() {
    // Everything up to and including the finish chunk, then silence (no usage chunk, no [DONE]).
    let reply = MockReply::text("all done");
    let events = reply.chunks("gpt-test", false).unwrap().len();
    let mock = MockOpenAi::start()
        .await
        .with_replies([reply.stall_after_chunks(events)]);
    let cfg = config(&mock).with_stream_chunk_timeout(Duration::from_millis(200));
    let (res, chunks) = stream(&OpenAiCompatModel::new(cfg).unwrap(), &Call::user("x")).await;
    let msg = res.unwrap();
    assert_eq!(msg.content, Content::Text("all done".into()));
    assert_eq!(msg.finish_reason(), Some("stop"));
    assert_eq!(
        chunks.last().unwrap().chunk_position.as_deref(),
        Some("last")
    );
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
    model(&mock).invoke(call.req()).await.unwrap();
    let body = mock.last_request().unwrap().body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "ls"}})
    );
    assert_eq!(body["parallel_tool_calls"], json!(false));
}
