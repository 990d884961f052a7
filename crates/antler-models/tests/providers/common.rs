//! Helpers every provider test uses, and [`Vendor`]: what the shared driver tests of
//! `driver.rs` need to know about one provider and its mock server.

use std::sync::Arc;

use antler_models::providers::anthropic::Messages;
use antler_models::providers::gemini::Gemini as GeminiApi;
use antler_models::providers::ollama::OllamaChat;
use antler_models::providers::openai_compat::ChatCompletions;
use antler_models::providers::openai_responses::Responses as ResponsesApi;
use antler_models::providers::{HttpChatModel, HttpModelConfig, WireFormat};
use antler_models::{ChatModel, ChatRequest, ModelError};
use antler_protocol::{
    AiMessage, AiMessageChunk, Content, Message, Object, ToolCall, ToolMessage, ToolSpec,
    UsageMetadata,
};
use antler_test_support::{
    anthropic_error, gemini_error, ollama_error, openai_error, AnthropicBlock, AnthropicReply,
    AnthropicWire, GeminiReply, GeminiWire, MockReply, MockRequest, MockServer, MockWire,
    OllamaReply, OllamaToolCall, OllamaWire, OpenAiWire, Reply, ResponsesItem, ResponsesReply,
    ResponsesWire,
};
use serde_json::{json, Value};

pub const MESSAGE_ID: &str = "lc_run--test-1";

/// The "Hello there." answer of the text-reply tests, with `metadata` and `usage`.
pub fn hello_there(metadata: Value, usage: UsageMetadata) -> AiMessage {
    AiMessage {
        content: "Hello there.".into(),
        response_metadata: obj(metadata).into(),
        id: Some(MESSAGE_ID.into()),
        usage_metadata: Some(usage),
        ..Default::default()
    }
}

/// `req` was a `POST` to `path`.
pub fn assert_post(req: &MockRequest, path: &str) {
    assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", path));
}

pub fn secs(n: u64) -> std::time::Duration {
    std::time::Duration::from_secs(n)
}

pub fn obj(v: Value) -> Object {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

/// Owned pieces of a [`ChatRequest`].
#[derive(Default)]
pub struct Call {
    pub system: Option<String>,
    pub messages: Vec<Arc<Message>>,
    pub tools: Vec<Arc<ToolSpec>>,
    pub tool_choice: Option<Value>,
    pub settings: Object,
}

impl Call {
    pub fn user(text: &str) -> Self {
        Call {
            system: Some("You are a test.".into()),
            messages: vec![Arc::new(Message::human(text))],
            ..Default::default()
        }
    }

    pub fn then(mut self, msg: impl Into<Message>) -> Self {
        self.messages.push(Arc::new(msg.into()));
        self
    }

    pub fn req(&self) -> ChatRequest<'_> {
        ChatRequest {
            system: self.system.as_deref(),
            messages: &self.messages,
            tools: &self.tools,
            tool_choice: self.tool_choice.as_ref(),
            settings: &self.settings,
            message_id: MESSAGE_ID,
            encodings: None,
        }
    }
}

/// Vendor `V`'s model answering one user message `text` (it must succeed).
pub async fn invoke_user<V: Vendor>(mock: &MockServer<V::Mock>, text: &str) -> AiMessage {
    V::model(mock).invoke(Call::user(text).req()).await.unwrap()
}

/// Stream `call`; the result and every chunk the sink received.
pub async fn stream<W: WireFormat>(
    model: &HttpChatModel<W>,
    call: &Call,
) -> (Result<AiMessage, ModelError>, Vec<AiMessageChunk>) {
    let mut chunks = Vec::new();
    let mut sink = |c: AiMessageChunk| chunks.push(c);
    let res = model.stream(call.req(), &mut sink).await;
    (res, chunks)
}

/// One answer to `call`: streamed (with every chunk the sink received) or invoked (no chunks).
pub async fn answer<W: WireFormat>(
    model: &HttpChatModel<W>,
    call: &Call,
    streaming: bool,
) -> (AiMessage, Vec<AiMessageChunk>) {
    if streaming {
        let (res, chunks) = stream(model, call).await;
        (res.unwrap(), chunks)
    } else {
        (model.invoke(call.req()).await.unwrap(), Vec::new())
    }
}

/// Invoke and stream the same call (the mock needs two replies queued); both results.
pub async fn both<W: WireFormat>(model: &HttpChatModel<W>, call: &Call) -> [AiMessage; 2] {
    let invoked = model.invoke(call.req()).await.unwrap();
    let (streamed, _) = stream(model, call).await;
    [invoked, streamed.unwrap()]
}

pub fn text_of(chunks: &[AiMessageChunk]) -> String {
    chunks.iter().map(|c| c.content.text()).collect()
}

pub fn reasoning_of(chunks: &[AiMessageChunk]) -> Vec<&str> {
    chunks
        .iter()
        .filter_map(|c| {
            c.additional_kwargs
                .get("reasoning_content")
                .and_then(Value::as_str)
        })
        .collect()
}

/// The tool-call chunks of a stream rebuild `expected` (each call's arguments, by call index):
/// the first fragment of each call names it, later ones carry only arguments.
pub fn assert_fragments_rebuild(chunks: &[AiMessageChunk], expected: &[Value]) {
    let fragments: Vec<_> = chunks
        .iter()
        .flat_map(|c| c.tool_call_chunks.iter())
        .collect();
    for (index, expected) in expected.iter().enumerate() {
        let of_call: Vec<_> = fragments
            .iter()
            .filter(|f| f.index == Some(index as i64))
            .collect();
        assert!(of_call.len() >= 3, "arguments split into several fragments");
        assert!(of_call[0].id.is_some() && of_call[0].name.is_some());
        assert!(of_call[1..]
            .iter()
            .all(|f| f.id.is_none() && f.name.is_none()));
        let args: String = of_call.iter().filter_map(|f| f.args.as_deref()).collect();
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(&parsed, expected);
    }
}

/// Invoke `call` on `model` (it must succeed); the body `mock` received.
pub async fn sent_body<W: WireFormat, M: MockWire>(
    model: &HttpChatModel<W>,
    mock: &MockServer<M>,
    call: &Call,
) -> Value {
    model.invoke(call.req()).await.unwrap();
    mock.last_request().unwrap().body
}

/// `body` sends neither `tools` nor `tool_choice`.
pub fn assert_no_tools(body: &Value) {
    assert!(
        body.get("tools").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );
}

/// The results of the two-call round trips: `a.txt` for call `ids[0]`, the error
/// `Error: no such file` for `ids[1]`.
pub fn round_trip_results(ids: [&str; 2]) -> [ToolMessage; 2] {
    [
        ToolMessage::new(ids[0], "a.txt"),
        ToolMessage::error(ids[1], "Error: no such file"),
    ]
}

/// A vendor whose mock can script the first answer of the two-call round trip.
pub trait TwoCalls: Vendor {
    /// Calls `ls` on `/mnt` and `read_file` on `/x`, after "Checking both." where the vendor's
    /// round trip test has text.
    fn two_calls() -> Reply<Self::Mock>;
}

/// The first leg of a two-call round trip, as run by [`first_leg`]: the mock, the model, the
/// `look` call offering `ls` and `read_file`, the first answer, and its chunks when streamed.
pub struct FirstLeg<V: Vendor>(
    pub MockServer<V::Mock>,
    pub HttpChatModel<V::Wire>,
    pub Call,
    pub AiMessage,
    pub Vec<AiMessageChunk>,
);

/// A mock answering [`TwoCalls::two_calls`] and then `Done.`, and the first answer to the `look`
/// call offering `ls` and `read_file`.
pub async fn first_leg<V: TwoCalls>(streaming: bool) -> FirstLeg<V> {
    let mock = MockServer::<V::Mock>::start()
        .await
        .with_replies([V::two_calls(), V::text("Done.")]);
    let model = V::model(&mock);
    let mut call = Call::user("look");
    call.tools = vec![path_tool("ls"), path_tool("read_file")];
    let (first, chunks) = answer(&model, &call, streaming).await;
    FirstLeg(mock, model, call, first, chunks)
}

impl TwoCalls for Anthropic {
    fn two_calls() -> AnthropicReply {
        AnthropicReply::blocks([
            AnthropicBlock::text("Checking both."),
            AnthropicBlock::tool_use("toolu_a", "ls", json!({"path": "/mnt"})),
            AnthropicBlock::tool_use("toolu_b", "read_file", json!({"path": "/x"})),
        ])
    }
}

impl TwoCalls for Ollama {
    fn two_calls() -> OllamaReply {
        OllamaReply::tool_calls([
            OllamaToolCall::new("ls", json!({"path": "/mnt"})),
            OllamaToolCall::new("read_file", json!({"path": "/x"})).with_id("call_given"),
        ])
    }
}

impl TwoCalls for Responses {
    fn two_calls() -> ResponsesReply {
        ResponsesReply::items([
            ResponsesItem::text("Checking both."),
            ResponsesItem::function_call("call_a", "ls", json!({"path": "/mnt"})),
            ResponsesItem::function_call("call_b", "read_file", json!({"path": "/x"})),
        ])
    }
}

/// The second leg of a two-call round trip: `call` continued by `first` and its `results` must
/// be answered `Done.` with no violation; the body `mock` received.
pub async fn second_leg<W: WireFormat, M: MockWire>(
    model: &HttpChatModel<W>,
    mock: &MockServer<M>,
    call: Call,
    first: AiMessage,
    results: [ToolMessage; 2],
) -> Value {
    let [ok, failed] = results;
    let call = call.then(first).then(ok).then(failed);
    let second = model.invoke(call.req()).await.unwrap();
    assert_eq!(second.content, Content::Text("Done.".into()));
    mock.assert_no_violations();
    mock.last_request().unwrap().body
}

/// A parsed tool call `id` → `name` with the JSON object `args`.
pub fn tool_call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, obj(args))
}

pub fn without_provider_id(mut m: AiMessage) -> AiMessage {
    m.response_metadata.remove("id");
    m
}

/// A tool taking one string `path`, described as "The {name} tool".
pub fn path_tool(name: &str) -> Arc<ToolSpec> {
    Arc::new(ToolSpec {
        name: name.into(),
        description: format!("The {name} tool"),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    })
}

/// The history of [`Vendor::broken_history`]: a call `{prefix}lost` (to `bash`) nobody answers,
/// a human turn, optionally an assistant turn "hm", then a result for the unknown call
/// `{prefix}unknown`, named `result_name` when given.
pub fn broken_call(prefix: &str, ai_turn: bool, result_name: Option<&str>) -> Call {
    let dangling = AiMessage {
        tool_calls: vec![ToolCall::new(
            format!("{prefix}lost"),
            "bash",
            Object::new(),
        )]
        .into(),
        ..Default::default()
    };
    let mut call = Call::user("run it")
        .then(dangling)
        .then(Message::human("well?"));
    if ai_turn {
        call = call.then(Message::ai("hm"));
    }
    let mut result = ToolMessage::new(format!("{prefix}unknown"), "?");
    if let Some(name) = result_name {
        result = result.with_name(name);
    }
    call.then(result)
}

/// An HTTP error reply and what the model must make of it.
pub struct HttpCase<M: MockWire> {
    pub reply: Reply<M>,
    pub status: u16,
    pub retry_after: Option<std::time::Duration>,
    pub code: Option<&'static str>,
    pub message: &'static str,
}

/// One provider as the shared driver tests see it: its wire format, its mock server, and the
/// vendor-specific facts those tests check.
pub trait Vendor {
    type Mock: MockWire;
    type Wire: WireFormat;

    const MODEL: &'static str;
    const API_KEY: &'static str;
    /// Where a default config posts.
    const DEFAULT_ENDPOINT: &'static str;
    /// A host name without a scheme, which is not a valid `base_url`.
    const BARE_HOST: &'static str;
    /// Events a streamed text answer sends before its first text delta.
    const LEADING_EVENTS: usize;
    /// The status, message and code of the mock's answer to a wrong key.
    const UNAUTHORIZED: (u16, &'static str, Option<&'static str>);
    /// The `finish_reason` of a plain text answer.
    const STOP: &'static str = "stop";

    fn config(mock: &MockServer<Self::Mock>) -> HttpModelConfig<Self::Wire> {
        HttpModelConfig::new(Self::MODEL)
            .with_base_url(mock.base_url())
            .with_api_key(Some(Self::API_KEY.into()))
    }

    fn model(mock: &MockServer<Self::Mock>) -> HttpChatModel<Self::Wire> {
        HttpChatModel::new(Self::config(mock)).unwrap()
    }

    fn text(text: &str) -> Reply<Self::Mock> {
        Reply::answer(Self::Mock::text(text))
    }

    /// The usage metadata of an answer scripted with `.usage(input, output)`.
    fn usage(input: u64, output: u64) -> UsageMetadata;

    /// Rate-limit and overload answers.
    fn retry_cases() -> Vec<HttpCase<Self::Mock>>;

    /// Bodies of 2xx answers that are not an answer, and a piece of the error each gives.
    fn undecodable() -> Vec<(String, &'static str)>;

    /// An error the provider sends mid-stream, and a piece of the error it gives.
    fn stream_error() -> (Value, &'static str);

    /// How many of `reply`'s stream events it takes to say the answer is complete.
    fn events_through_finish(reply: &Reply<Self::Mock>) -> usize;

    /// A history with an unanswered call and a result for an unknown call, and the two call
    /// ids in the order the mock reports them.
    fn broken_history() -> (Call, [&'static str; 2]);
}

pub struct OpenAi;

impl Vendor for OpenAi {
    type Mock = OpenAiWire;
    type Wire = ChatCompletions;

    const MODEL: &'static str = "gpt-test";
    const API_KEY: &'static str = "sk-test";
    const DEFAULT_ENDPOINT: &'static str = "https://api.openai.com/v1/chat/completions";
    const BARE_HOST: &'static str = "api.openai.com";
    // The role chunk.
    const LEADING_EVENTS: usize = 1;
    const UNAUTHORIZED: (u16, &'static str, Option<&'static str>) = (
        401,
        "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
        Some("invalid_api_key"),
    );

    fn usage(input: u64, output: u64) -> UsageMetadata {
        openai_usage(input, output, 0, 0)
    }

    fn retry_cases() -> Vec<HttpCase<OpenAiWire>> {
        vec![HttpCase {
            reply: MockReply::error(
                429,
                openai_error(
                    "Rate limit reached for gpt-test",
                    "requests",
                    Some("rate_limit_exceeded"),
                ),
            )
            .retry_after(7),
            status: 429,
            retry_after: Some(secs(7)),
            code: Some("rate_limit_exceeded"),
            message: "Rate limit reached for gpt-test",
        }]
    }

    fn undecodable() -> Vec<(String, &'static str)> {
        vec![
            ("{not json".into(), "not a chat completion"),
            (
                r#"{"id":"x","object":"chat.completion"}"#.into(),
                "no choices",
            ),
            (r#"{"choices":[]}"#.into(), "no choices"),
            (
                r#"{"error":{"message":"upstream overloaded"}}"#.into(),
                "upstream overloaded",
            ),
        ]
    }

    fn stream_error() -> (Value, &'static str) {
        (
            json!({"message": "upstream died", "type": "server_error"}),
            "upstream died",
        )
    }

    fn events_through_finish(reply: &MockReply) -> usize {
        // Up to the finish chunk: no usage chunk, no `[DONE]`.
        reply.chunks(Self::MODEL, false).unwrap().len()
    }

    fn broken_history() -> (Call, [&'static str; 2]) {
        (
            broken_call("call_", false, None),
            ["call_unknown", "call_lost"],
        )
    }
}

/// OpenAI's usage metadata, with its audio, cache-read and reasoning details.
pub fn openai_usage(input: u64, output: u64, cached: u64, reasoning: u64) -> UsageMetadata {
    UsageMetadata {
        input_token_details: Some(obj(json!({"audio": 0, "cache_read": cached}))),
        output_token_details: Some(obj(json!({"audio": 0, "reasoning": reasoning}))),
        ..UsageMetadata::new(input, output)
    }
}

pub struct Anthropic;

impl Vendor for Anthropic {
    type Mock = AnthropicWire;
    type Wire = Messages;

    const MODEL: &'static str = "claude-test";
    const API_KEY: &'static str = "sk-ant-test";
    const DEFAULT_ENDPOINT: &'static str = "https://api.anthropic.com/v1/messages";
    const BARE_HOST: &'static str = "api.anthropic.com";
    // message_start, ping, content_block_start.
    const LEADING_EVENTS: usize = 3;
    const UNAUTHORIZED: (u16, &'static str, Option<&'static str>) =
        (401, "invalid x-api-key", Some("authentication_error"));

    fn usage(input: u64, output: u64) -> UsageMetadata {
        anthropic_usage(input, output, 0, 0)
    }

    fn retry_cases() -> Vec<HttpCase<AnthropicWire>> {
        vec![
            HttpCase {
                reply: AnthropicReply::rate_limited(7),
                status: 429,
                retry_after: Some(secs(7)),
                code: Some("rate_limit_error"),
                message: "Number of request tokens has exceeded your per-minute rate limit",
            },
            HttpCase {
                reply: AnthropicReply::overloaded().retry_after(2),
                status: 529,
                retry_after: Some(secs(2)),
                code: Some("overloaded_error"),
                message: "Overloaded",
            },
        ]
    }

    fn undecodable() -> Vec<(String, &'static str)> {
        vec![
            ("{not json".into(), "not a Messages API message"),
            (
                r#"{"id":"msg_1","type":"message","role":"assistant"}"#.into(),
                "no content",
            ),
            (
                anthropic_error("api_error", "upstream overloaded").to_string(),
                "api_error: upstream overloaded",
            ),
            (
                r#"{"type":"completion","completion":"hi"}"#.into(),
                "type 'completion'",
            ),
        ]
    }

    fn stream_error() -> (Value, &'static str) {
        (
            json!({"type": "overloaded_error", "message": "Overloaded"}),
            "overloaded_error: Overloaded",
        )
    }

    fn events_through_finish(reply: &AnthropicReply) -> usize {
        // Everything but `message_stop`.
        reply.events(Self::MODEL).unwrap().len() - 1
    }

    fn broken_history() -> (Call, [&'static str; 2]) {
        (
            broken_call("toolu_", true, None),
            ["toolu_lost", "toolu_unknown"],
        )
    }
}

/// LangChain's reading of Anthropic usage: cache reads and writes count as input.
pub fn anthropic_usage(
    input: u64,
    output: u64,
    cache_read: u64,
    cache_creation: u64,
) -> UsageMetadata {
    UsageMetadata {
        input_token_details: Some(obj(
            json!({"cache_read": cache_read, "cache_creation": cache_creation}),
        )),
        ..UsageMetadata::new(input + cache_read + cache_creation, output)
    }
}

pub struct Gemini;

impl Vendor for Gemini {
    type Mock = GeminiWire;
    type Wire = GeminiApi;

    const MODEL: &'static str = "gemini-test";
    const API_KEY: &'static str = "AIza-test";
    const DEFAULT_ENDPOINT: &'static str =
        "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent";
    const BARE_HOST: &'static str = "generativelanguage.googleapis.com";
    const LEADING_EVENTS: usize = 0;
    // The API answers a key it does not accept with 400, not 401.
    const UNAUTHORIZED: (u16, &'static str, Option<&'static str>) = (
        400,
        "API key not valid. Please pass a valid API key.",
        Some("INVALID_ARGUMENT"),
    );
    const STOP: &'static str = "STOP";

    fn usage(input: u64, output: u64) -> UsageMetadata {
        UsageMetadata::new(input, output)
    }

    fn retry_cases() -> Vec<HttpCase<GeminiWire>> {
        vec![
            HttpCase {
                reply: GeminiReply::rate_limited(7),
                status: 429,
                retry_after: Some(secs(7)),
                code: Some("RESOURCE_EXHAUSTED"),
                message:
                    "You exceeded your current quota, please check your plan and billing details.",
            },
            HttpCase {
                reply: GeminiReply::overloaded(),
                status: 503,
                retry_after: None,
                code: Some("UNAVAILABLE"),
                message: "The model is overloaded. Please try again later.",
            },
        ]
    }

    fn undecodable() -> Vec<(String, &'static str)> {
        vec![
            ("{not json".into(), "not a GenerateContentResponse"),
            (r#"{"candidates":[]}"#.into(), "no candidates"),
            (
                gemini_error(500, "upstream overloaded", "INTERNAL").to_string(),
                "INTERNAL: upstream overloaded",
            ),
        ]
    }

    fn stream_error() -> (Value, &'static str) {
        (
            json!({"code": 500, "message": "upstream died", "status": "INTERNAL"}),
            "INTERNAL: upstream died",
        )
    }

    fn events_through_finish(reply: &GeminiReply) -> usize {
        // The last chunk carries the finish reason; there is no end marker.
        reply.chunks().unwrap().len()
    }

    fn broken_history() -> (Call, [&'static str; 2]) {
        (
            broken_call("call_", true, Some("mystery")),
            ["bash", "mystery"],
        )
    }
}

pub struct Ollama;

impl Vendor for Ollama {
    type Mock = OllamaWire;
    type Wire = OllamaChat;

    const MODEL: &'static str = "qwen-test";
    const API_KEY: &'static str = "proxy-key";
    const DEFAULT_ENDPOINT: &'static str = "http://localhost:11434/api/chat";
    const BARE_HOST: &'static str = "localhost:11434";
    const LEADING_EVENTS: usize = 0;
    const UNAUTHORIZED: (u16, &'static str, Option<&'static str>) = (401, "unauthorized", None);

    fn usage(input: u64, output: u64) -> UsageMetadata {
        UsageMetadata::new(input, output)
    }

    fn retry_cases() -> Vec<HttpCase<OllamaWire>> {
        vec![
            HttpCase {
                reply: OllamaReply::busy(),
                status: 503,
                retry_after: None,
                code: None,
                message: "server busy, please try again.  maximum pending requests exceeded",
            },
            HttpCase {
                reply: OllamaReply::error(429, ollama_error("too many requests")).retry_after(3),
                status: 429,
                retry_after: Some(secs(3)),
                code: None,
                message: "too many requests",
            },
        ]
    }

    fn undecodable() -> Vec<(String, &'static str)> {
        vec![
            ("{not json".into(), "not an Ollama chat response"),
            (r#"{"model":"m","done":true}"#.into(), "no message"),
            (
                r#"{"error":"upstream overloaded"}"#.into(),
                "upstream overloaded",
            ),
        ]
    }

    fn stream_error() -> (Value, &'static str) {
        (
            json!("model runner has unexpectedly stopped"),
            "model runner has unexpectedly stopped",
        )
    }

    fn events_through_finish(reply: &OllamaReply) -> usize {
        // The `done` line is the last.
        reply.lines(Self::MODEL).unwrap().len()
    }

    fn broken_history() -> (Call, [&'static str; 2]) {
        (
            broken_call("call_", false, Some("mystery")),
            ["bash", "mystery"],
        )
    }
}

pub struct Responses;

impl Vendor for Responses {
    type Mock = ResponsesWire;
    type Wire = ResponsesApi;

    const MODEL: &'static str = "gpt-5-test";
    const API_KEY: &'static str = "sk-test";
    const DEFAULT_ENDPOINT: &'static str = "https://api.openai.com/v1/responses";
    const BARE_HOST: &'static str = "api.openai.com";
    // response.created, response.in_progress, output_item.added, content_part.added.
    const LEADING_EVENTS: usize = 4;
    const UNAUTHORIZED: (u16, &'static str, Option<&'static str>) =
        (401, "Incorrect API key provided.", Some("invalid_api_key"));

    fn usage(input: u64, output: u64) -> UsageMetadata {
        UsageMetadata {
            input_token_details: Some(obj(json!({"cache_read": 0}))),
            output_token_details: Some(obj(json!({"reasoning": 0}))),
            ..UsageMetadata::new(input, output)
        }
    }

    fn retry_cases() -> Vec<HttpCase<ResponsesWire>> {
        vec![HttpCase {
            reply: ResponsesReply::error(
                429,
                openai_error(
                    "Rate limit reached for gpt-5-test",
                    "requests",
                    Some("rate_limit_exceeded"),
                ),
            )
            .retry_after(7),
            status: 429,
            retry_after: Some(secs(7)),
            code: Some("rate_limit_exceeded"),
            message: "Rate limit reached for gpt-5-test",
        }]
    }

    fn undecodable() -> Vec<(String, &'static str)> {
        vec![
            ("{not json".into(), "not a Responses API response"),
            (
                r#"{"id":"resp_1","object":"response","status":"completed"}"#.into(),
                "no output",
            ),
            (
                r#"{"error":{"code":"server_error","message":"upstream overloaded"}}"#.into(),
                "server_error: upstream overloaded",
            ),
            (
                r#"{"object":"chat.completion","choices":[]}"#.into(),
                "object 'chat.completion'",
            ),
        ]
    }

    fn stream_error() -> (Value, &'static str) {
        (
            json!({"code": "server_error", "message": "upstream died"}),
            "server_error: upstream died",
        )
    }

    fn events_through_finish(reply: &ResponsesReply) -> usize {
        // Up to and including `response.completed`.
        reply.events(Self::MODEL).unwrap().len()
    }

    fn broken_history() -> (Call, [&'static str; 2]) {
        (
            broken_call("call_", false, None),
            ["call_unknown", "call_lost"],
        )
    }
}
