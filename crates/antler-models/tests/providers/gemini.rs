//! The Gemini wire format against the Gemini mock of `antler-test-support`: contents and parts,
//! `systemInstruction`, function calls and responses (with thought signatures), thoughts,
//! `usageMetadata` and Gemini's finish reasons. What the driver does alike for every provider is
//! in `driver.rs`.

use std::sync::Arc;

use antler_models::providers::gemini::{GeminiModel, THOUGHT_SIGNATURES_KEY};
use antler_models::ChatModel;
use antler_protocol::{
    AiMessage, Content, Message, ToolCall, ToolMessage, ToolSpec, UsageMetadata,
};
use antler_test_support::{GeminiPart, GeminiReply, MockGemini};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{
    answer, assert_post, both, hello_there, obj, path_tool, reasoning_of, round_trip_results,
    second_leg, sent_body, stream, text_of, without_provider_id, Call, Gemini, Vendor,
};

const MODEL: &str = Gemini::MODEL;

/// [`path_tool`] with a closed schema (`additionalProperties: false`), which Gemini is sent as is.
fn tool(name: &str) -> Arc<ToolSpec> {
    let mut spec = path_tool(name);
    Arc::make_mut(&mut spec).parameters["additionalProperties"] = json!(false);
    spec
}

#[tokio::test]
async fn text_reply_request_shape_and_key_header() {
    let mock = MockGemini::start()
        .await
        .require_api_key(Gemini::API_KEY)
        .with_replies([GeminiReply::text("Hello there.").usage(12, 4)]);
    let mut cfg = Gemini::config(&mock);
    cfg.wire.set("temperature", &json!(0.2));
    cfg.wire.set("max_tokens", &json!(512));
    cfg.wire.set("stop", &json!("END"));
    cfg.wire.set(
        "safety_settings",
        &json!({"HARM_CATEGORY_HARASSMENT": "BLOCK_NONE"}),
    );
    let model = GeminiModel::new(cfg).unwrap();
    let call = Call::user("hi").then(Message::system("Be brief."));
    let msg = model.invoke(call.req()).await.unwrap();
    assert_eq!(
        msg,
        hello_there(
            json!({
                "finish_reason": "STOP",
                "model_name": MODEL,
                "id": "resp-mock-1",
                "model_version": "gemini-mock-001",
            }),
            UsageMetadata::new(12, 4)
        )
    );
    let req = mock.last_request().unwrap();
    assert_post(&req, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(req.header("x-goog-api-key"), Some(Gemini::API_KEY));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.body,
        json!({
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "systemInstruction": {"parts": [{"text": "You are a test.\n\nBe brief."}]},
            "generationConfig": {"temperature": 0.2, "maxOutputTokens": 512, "stopSequences": ["END"]},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        })
    );
    // Streaming goes to its own method with SSE framing.
    mock.push(GeminiReply::text("Hi."));
    let (res, _) = stream(&model, &Call::user("hi")).await;
    res.unwrap();
    assert_eq!(
        mock.last_request().unwrap().path,
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn function_calls_round_trip_with_signatures_and_named_responses() {
    for streaming in [false, true] {
        let mock = MockGemini::start()
            .await
            .require_thought_signatures()
            .with_replies([
                GeminiReply::parts([
                    GeminiPart::text("Checking both."),
                    GeminiPart::signed_call("ls", json!({"path": "/mnt"}), "sig-a"),
                    GeminiPart::signed_call("read_file", json!({"path": "/x"}), "sig-b"),
                ]),
                GeminiReply::text("Done."),
            ]);
        let model = Gemini::model(&mock);
        let mut call = Call::user("look");
        call.tools = vec![tool("ls"), tool("read_file")];
        let (first, chunks) = answer(&model, &call, streaming).await;
        assert_eq!(first.finish_reason(), Some("STOP"));
        assert_eq!(first.content, Content::Text("Checking both.".into()));
        let names: Vec<_> = first.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ls", "read_file"]);
        assert_eq!(first.tool_calls[0].args, obj(json!({"path": "/mnt"})));
        let ids: Vec<String> = first
            .tool_calls
            .iter()
            .map(|c| c.id_str().to_owned())
            .collect();
        assert!(ids.iter().all(|id| id.starts_with("call_")) && ids[0] != ids[1]);
        assert_eq!(
            first.additional_kwargs[THOUGHT_SIGNATURES_KEY],
            json!({ids[0].as_str(): "sig-a", ids[1].as_str(): "sig-b"})
        );
        if streaming {
            // Each call arrives whole, under the id the message keeps.
            let calls: Vec<_> = chunks
                .iter()
                .flat_map(|c| c.tool_call_chunks.iter())
                .collect();
            assert_eq!(calls.len(), 2);
            assert_eq!(calls[1].id.as_deref(), Some(ids[1].as_str()));
            assert_eq!(calls[1].index, Some(1));
            assert_eq!(calls[1].args.as_deref(), Some(r#"{"path":"/x"}"#));
        }

        let results = round_trip_results([&ids[0], &ids[1]]);
        let body = second_leg(&model, &mock, call, first, results).await;
        assert_eq!(
            body["contents"],
            json!([
                {"role": "user", "parts": [{"text": "look"}]},
                {"role": "model", "parts": [
                    {"text": "Checking both."},
                    {"functionCall": {"name": "ls", "args": {"path": "/mnt"}}, "thoughtSignature": "sig-a"},
                    {"functionCall": {"name": "read_file", "args": {"path": "/x"}}, "thoughtSignature": "sig-b"},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "ls", "response": {"output": "a.txt"}}},
                    {"functionResponse": {"name": "read_file", "response": {"error": "Error: no such file"}}},
                ]},
            ]),
            "streaming: {streaming}"
        );
        assert_eq!(
            body["tools"],
            json!([{"functionDeclarations": [
                {"name": "ls", "description": "The ls tool", "parametersJsonSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}},
                {"name": "read_file", "description": "The read_file tool", "parametersJsonSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}},
            ]}])
        );
    }
}

#[tokio::test]
async fn a_call_replayed_without_its_signature_is_refused_by_the_strict_mock() {
    let mock = MockGemini::start().await.require_thought_signatures();
    let unsigned = AiMessage {
        tool_calls: vec![ToolCall::new("call_1", "ls", Default::default())].into(),
        ..Default::default()
    };
    let call = Call::user("x")
        .then(unsigned)
        .then(ToolMessage::new("call_1", "ok"));
    let err = Gemini::model(&mock).invoke(call.req()).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert!(mock.violations()[0].contains("thought_signature"));
}

#[tokio::test]
async fn thoughts_are_reasoning_content_and_thinking_config_is_sent() {
    let reply = || {
        GeminiReply::thinking("Let me think about it.", "Forty-two.")
            .usage(10, 3)
            .thought_and_cached_tokens(7, 4)
    };
    let mock = MockGemini::start().await.with_replies([reply(), reply()]);
    let mut cfg = Gemini::config(&mock);
    cfg.wire.set("thinking_budget", &json!(1024));
    cfg.wire.set("include_thoughts", &json!(true));
    let model = GeminiModel::new(cfg).unwrap();
    let call = Call::user("why?");
    let (streamed, chunks) = stream(&model, &call).await;
    let streamed = streamed.unwrap();
    assert_eq!(reasoning_of(&chunks).concat(), "Let me think about it.");
    assert_eq!(text_of(&chunks), "Forty-two.");
    let invoked = model.invoke(call.req()).await.unwrap();
    for msg in [&streamed, &invoked] {
        assert_eq!(msg.content, Content::Text("Forty-two.".into()));
        assert_eq!(
            msg.additional_kwargs["reasoning_content"],
            "Let me think about it."
        );
        assert_eq!(
            msg.usage_metadata,
            Some(UsageMetadata {
                input_tokens: 10,
                output_tokens: 10,
                total_tokens: 20,
                input_token_details: Some(obj(json!({"cache_read": 4}))),
                output_token_details: Some(obj(json!({"reasoning": 7}))),
            })
        );
    }
    assert_eq!(
        mock.requests()[0].body["generationConfig"],
        json!({"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
    );
    // Thoughts are not replayed.
    mock.push(GeminiReply::text("ok"));
    model
        .invoke(call.then(invoked).then(Message::human("and?")).req())
        .await
        .unwrap();
    assert_eq!(
        mock.last_request().unwrap().body["contents"][1],
        json!({"role": "model", "parts": [{"text": "Forty-two."}]})
    );
}

#[tokio::test]
async fn finish_reasons_and_a_blocked_prompt_keep_geminis_values() {
    let mock = MockGemini::start().await.with_replies([
        GeminiReply::text("cut sh").finish_reason("MAX_TOKENS"),
        GeminiReply::text("").finish_reason("SAFETY"),
        GeminiReply::blocked("PROHIBITED_CONTENT"),
        GeminiReply::blocked("PROHIBITED_CONTENT"),
    ]);
    let model = Gemini::model(&mock);
    let call = Call::user("x");
    let length = model.invoke(call.req()).await.unwrap();
    assert_eq!(length.finish_reason(), Some("MAX_TOKENS"));
    let safety = model.invoke(call.req()).await.unwrap();
    assert_eq!(safety.finish_reason(), Some("SAFETY"));
    assert_eq!(safety.content, Content::Text(String::new()));
    for blocked in [
        model.invoke(call.req()).await.unwrap(),
        stream(&model, &call).await.0.unwrap(),
    ] {
        assert_eq!(blocked.finish_reason(), Some("PROHIBITED_CONTENT"));
        assert_eq!(
            blocked.response_metadata["prompt_feedback"]["blockReason"],
            "PROHIBITED_CONTENT"
        );
        assert!(blocked.tool_calls.is_empty());
    }
}

#[tokio::test]
async fn tool_choice_maps_to_function_calling_config() {
    let mock = MockGemini::start().await;
    let model = Gemini::model(&mock);
    let mut call = Call::user("x");
    call.tools = vec![tool("ls")];
    for (choice, expected) in [
        (
            json!("auto"),
            json!({"functionCallingConfig": {"mode": "AUTO"}}),
        ),
        (
            json!("required"),
            json!({"functionCallingConfig": {"mode": "ANY"}}),
        ),
        (
            json!("none"),
            json!({"functionCallingConfig": {"mode": "NONE"}}),
        ),
        (
            json!({"name": "ls"}),
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}}),
        ),
    ] {
        call.tool_choice = Some(choice);
        model.invoke(call.req()).await.unwrap();
        assert_eq!(mock.last_request().unwrap().body["toolConfig"], expected);
    }
    // No tools: no tool config either.
    let mut bare = Call::user("x");
    bare.tool_choice = Some(json!("required"));
    model.invoke(bare.req()).await.unwrap();
    assert_eq!(mock.last_request().unwrap().body.get("toolConfig"), None);
}

#[tokio::test]
async fn call_settings_and_images_shape_the_request() {
    let mock = MockGemini::start().await;
    let model = Gemini::model(&mock);
    let mut call = Call {
        system: None,
        messages: vec![Arc::new(Message::human(Content::Blocks(vec![
            json!({"type": "text", "text": "what is this?"}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}),
            json!({"type": "text", "text": "   "}),
        ])))],
        ..Default::default()
    };
    call.settings = obj(json!({"max_tokens": 64, "temperature": null, "reasoning_effort": "high"}));
    let body = sent_body(&model, &mock, &call).await;
    assert_eq!(
        body,
        json!({
            "contents": [{"role": "user", "parts": [
                {"text": "what is this?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
            ]}],
            "generationConfig": {"maxOutputTokens": 64},
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn a_stream_split_into_tiny_writes_folds_like_the_unstreamed_answer() {
    let reply = || {
        GeminiReply::text("one two three")
            .usage(5, 3)
            .sse_fragment_size(7)
    };
    let mock = MockGemini::start().await.with_replies([reply(), reply()]);
    let [invoked, streamed] = both(&Gemini::model(&mock), &Call::user("count")).await;
    assert_eq!(streamed.content, Content::Text("one two three".into()));
    assert_eq!(without_provider_id(streamed), without_provider_id(invoked));
}

#[test]
fn endpoints_keep_a_versioned_base_url() {
    use antler_models::providers::gemini::Gemini as Wire;
    use antler_models::providers::WireFormat;
    assert_eq!(
        Wire::endpoint("https://proxy.example/gemini/v1", "models/gemini-x", true),
        "https://proxy.example/gemini/v1/models/gemini-x:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        Wire::endpoint("http://127.0.0.1:9/", "gemini-x", false),
        "http://127.0.0.1:9/v1beta/models/gemini-x:generateContent"
    );
}
