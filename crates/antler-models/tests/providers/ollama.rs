//! The Ollama wire format against the Ollama mock of `antler-test-support`: flat messages with
//! images, tool calls with object arguments named back in `tool_name`, `think`, `options`,
//! NDJSON streams and eval counts as usage. What the driver does alike for every provider is in
//! `driver.rs`.

use std::sync::Arc;

use antler_models::providers::ollama::OllamaModel;
use antler_models::ChatModel;
use antler_protocol::{Content, InvalidToolCall, Message, UsageMetadata};
use antler_test_support::{MockOllama, OllamaReply};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{
    assert_post, both, first_leg, hello_there, invoke_user, obj, reasoning_of, round_trip_results,
    second_leg, stream, text_of, Call, FirstLeg, Ollama, Vendor,
};

const MODEL: &str = Ollama::MODEL;

#[tokio::test]
async fn text_reply_request_shape_and_options() {
    let mock = MockOllama::start()
        .await
        .with_replies([OllamaReply::text("Hello there.").usage(12, 4)]);
    let mut cfg = Ollama::config(&mock);
    cfg.api_key = None;
    for (k, v) in [
        ("num_predict", json!(8192)),
        ("temperature", json!(0.7)),
        ("reasoning", json!(false)),
        ("keep_alive", json!("5m")),
    ] {
        assert!(cfg.wire.set(k, &v), "{k}");
    }
    assert!(!cfg.wire.set("validate_model_on_init", &json!(true)));
    let model = OllamaModel::new(cfg).unwrap();
    let msg = model
        .invoke(Call::user("hi").then(Message::system("Be brief.")).req())
        .await
        .unwrap();
    assert_eq!(
        msg,
        hello_there(
            json!({
                "finish_reason": "stop",
                "model_name": MODEL,
                "done_reason": "stop",
                "created_at": "2025-01-01T00:00:00.000000Z",
                "total_duration": 1_000_000,
                "load_duration": 100_000,
                "prompt_eval_duration": 200_000,
                "eval_duration": 700_000,
            }),
            UsageMetadata::new(12, 4)
        )
    );
    let req = mock.last_request().unwrap();
    assert_post(&req, "/api/chat");
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.body,
        json!({
            "model": MODEL,
            "messages": [
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "Be brief."},
            ],
            "stream": false,
            "think": false,
            "options": {"num_predict": 8192, "temperature": 0.7},
            "keep_alive": "5m",
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn tool_calls_round_trip_with_object_arguments_and_tool_names() {
    for streaming in [false, true] {
        let FirstLeg(mock, model, call, first, chunks) = first_leg::<Ollama>(streaming).await;
        assert_eq!(first.finish_reason(), Some("tool_calls"));
        assert_eq!(first.response_metadata["done_reason"], "stop");
        let names: Vec<_> = first.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ls", "read_file"]);
        assert_eq!(first.tool_calls[0].args, obj(json!({"path": "/mnt"})));
        assert!(first.tool_calls[0].id_str().starts_with("call_"));
        assert_eq!(first.tool_calls[1].id_str(), "call_given");
        if streaming {
            let calls: Vec<_> = chunks
                .iter()
                .flat_map(|c| c.tool_call_chunks.iter())
                .collect();
            assert_eq!(calls.len(), 2, "each call arrives whole");
            assert_eq!(calls[0].id.as_deref(), first.tool_calls[0].id.as_deref());
            assert_eq!(calls[1].args.as_deref(), Some(r#"{"path":"/x"}"#));
        }
        let ids: Vec<String> = first
            .tool_calls
            .iter()
            .map(|c| c.id_str().to_owned())
            .collect();
        let results = round_trip_results([&ids[0], &ids[1]]);
        let body = second_leg(&model, &mock, call, first, results).await;
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "ls", "arguments": {"path": "/mnt"}}},
                    {"function": {"name": "read_file", "arguments": {"path": "/x"}}},
                ]},
                {"role": "tool", "content": "a.txt", "tool_name": "ls", "tool_call_id": ids[0]},
                {"role": "tool", "content": "Error: no such file", "tool_name": "read_file", "tool_call_id": ids[1]},
            ]),
            "streaming: {streaming}"
        );
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "function": {"name": "ls", "description": "The ls tool", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
        );
    }
}

#[tokio::test]
async fn string_arguments_are_read_and_non_objects_become_invalid_calls() {
    let raw = r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"","tool_calls":[
        {"function":{"name":"ls","arguments":"{\"path\":\"/\"}"}},
        {"function":{"name":"bash","arguments":"[1,2]"}}
    ]},"done":true,"done_reason":"stop","prompt_eval_count":1,"eval_count":1}"#;
    let mock = MockOllama::start()
        .await
        .with_replies([OllamaReply::raw_body(200, raw)]);
    let msg = invoke_user::<Ollama>(&mock, "x").await;
    assert_eq!(msg.tool_calls.len(), 1);
    assert_eq!(msg.tool_calls[0].args, obj(json!({"path": "/"})));
    let InvalidToolCall { name, args, .. } = &msg.invalid_tool_calls[0];
    assert_eq!(
        (name.as_deref(), args.as_deref()),
        (Some("bash"), Some("[1,2]"))
    );
}

#[tokio::test]
async fn thinking_is_reasoning_content_streamed_and_unstreamed() {
    let reply = || OllamaReply::thinking("Let me think it through.", "Forty-two.").usage(9, 6);
    let mock = MockOllama::start().await.with_replies([reply(), reply()]);
    let mut cfg = Ollama::config(&mock);
    cfg.wire.set("reasoning", &json!(true));
    let model = OllamaModel::new(cfg).unwrap();
    let call = Call::user("why?");
    let (streamed, chunks) = stream(&model, &call).await;
    assert_eq!(reasoning_of(&chunks).concat(), "Let me think it through.");
    assert_eq!(text_of(&chunks), "Forty-two.");
    let streamed = streamed.unwrap();
    let invoked = model.invoke(call.req()).await.unwrap();
    assert_eq!(streamed, invoked);
    assert_eq!(
        invoked.additional_kwargs["reasoning_content"],
        "Let me think it through."
    );
    assert_eq!(mock.requests()[0].body["think"], true);
    assert_eq!(mock.requests()[0].body["stream"], true);
}

#[tokio::test]
async fn images_are_bare_base64_and_call_settings_go_to_options() {
    let mock = MockOllama::start().await;
    let model = Ollama::model(&mock);
    let mut call = Call {
        system: None,
        messages: vec![Arc::new(Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "what is this?"}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}),
        ])))],
        ..Default::default()
    };
    call.settings = obj(json!({"max_tokens": 64, "temperature": 0.1, "reasoning_effort": "high"}));
    model.invoke(call.req()).await.unwrap();
    assert_eq!(
        mock.last_request().unwrap().body,
        json!({
            "model": MODEL,
            "messages": [{"role": "user", "content": "what is this?", "images": ["iVBORw0K"]}],
            "stream": false,
            "options": {"num_predict": 64, "temperature": 0.1},
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn a_length_stop_and_tiny_writes() {
    let reply = || {
        OllamaReply::text("cut off he")
            .done_reason("length")
            .sse_fragment_size(5)
    };
    let mock = MockOllama::start().await.with_replies([reply(), reply()]);
    let [invoked, streamed] = both(&Ollama::model(&mock), &Call::user("x")).await;
    assert_eq!(invoked, streamed);
    assert_eq!(streamed.finish_reason(), Some("length"));
    assert_eq!(streamed.content, Content::Text("cut off he".into()));
}

#[test]
fn endpoints_drop_an_openai_style_v1() {
    use antler_models::providers::ollama::OllamaChat;
    use antler_models::providers::WireFormat;
    assert_eq!(
        OllamaChat::endpoint("http://localhost:11434/v1", "m", true),
        "http://localhost:11434/api/chat"
    );
    assert_eq!(
        OllamaChat::endpoint("http://host.docker.internal:11434/", "m", false),
        "http://host.docker.internal:11434/api/chat"
    );
}
