//! The Responses wire format against the Responses mock of `antler-test-support`: input items,
//! function calls paired by `call_id`, reasoning items (summaries as reasoning content, encrypted
//! content replayed), the typed stream events, `status`/`incomplete_details` and usage. What the
//! driver does alike for every provider is in `driver.rs`.

use antler_models::providers::openai_responses::ResponsesModel;
use antler_models::ChatModel;
use antler_protocol::{AiMessage, Content, Message, ToolMessage};
use antler_test_support::{MockResponses, ResponsesItem, ResponsesReply};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{
    assert_fragments_rebuild, assert_post, both, first_leg, hello_there, obj, path_tool as tool,
    reasoning_of, round_trip_results, second_leg, sent_body, stream, text_of, tool_call,
    without_provider_id, Call, FirstLeg, Responses, Vendor,
};

const MODEL: &str = Responses::MODEL;

#[tokio::test]
async fn text_reply_request_shape() {
    let mock = MockResponses::start()
        .await
        .require_api_key(Responses::API_KEY)
        .with_replies([ResponsesReply::text("Hello there.").usage(12, 4)]);
    let mut cfg = Responses::config(&mock);
    cfg.wire.max_output_tokens = Some(256);
    cfg.wire.reasoning_effort = Some("low".into());
    let model = ResponsesModel::new(cfg).unwrap();
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
                "id": "resp_mock_1",
                "status": "completed",
            }),
            Responses::usage(12, 4)
        )
    );
    let req = mock.last_request().unwrap();
    assert_post(&req, "/v1/responses");
    assert_eq!(req.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(
        req.body,
        json!({
            "model": MODEL,
            "input": [
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "Be brief."},
            ],
            "max_output_tokens": 256,
            "reasoning": {"effort": "low"},
        })
    );
    mock.assert_no_violations();
}

#[tokio::test]
async fn function_calls_round_trip_paired_by_call_id() {
    for streaming in [false, true] {
        let FirstLeg(mock, model, call, first, chunks) = first_leg::<Responses>(streaming).await;
        if streaming {
            assert_fragments_rebuild(&chunks, &[json!({"path": "/mnt"}), json!({"path": "/x"})]);
            assert_eq!(text_of(&chunks), "Checking both.");
        }
        assert_eq!(first.finish_reason(), Some("tool_calls"));
        assert_eq!(first.content, Content::Text("Checking both.".into()));
        assert_eq!(
            first.tool_calls,
            vec![
                tool_call("call_a", "ls", json!({"path": "/mnt"})),
                tool_call("call_b", "read_file", json!({"path": "/x"})),
            ]
        );
        let results = round_trip_results(["call_a", "call_b"]);
        let body = second_leg(&model, &mock, call, first, results).await;
        assert_eq!(
            body["input"],
            json!([
                {"role": "system", "content": "You are a test."},
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": "Checking both."},
                {"type": "function_call", "call_id": "call_a", "name": "ls", "arguments": "{\"path\":\"/mnt\"}"},
                {"type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": "{\"path\":\"/x\"}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "a.txt"},
                {"type": "function_call_output", "call_id": "call_b", "output": "Error: no such file"},
            ]),
            "streaming: {streaming}"
        );
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "name": "ls", "description": "The ls tool", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}})
        );
    }
}

#[tokio::test]
async fn reasoning_items_are_blocks_with_summaries_and_replayed_encrypted() {
    let reply = || {
        ResponsesReply::items([
            ResponsesItem::reasoning("Weighing the options.", Some("gAAAA-enc")),
            ResponsesItem::function_call("call_1", "ls", json!({})),
        ])
        .usage(20, 9)
        .cached_and_reasoning_tokens(5, 7)
    };
    let mock = MockResponses::start()
        .await
        .with_replies([reply(), reply()]);
    let mut cfg = Responses::config(&mock);
    cfg.wire.extra = obj(json!({"store": false, "reasoning": {"summary": "auto"}}));
    let model = ResponsesModel::new(cfg).unwrap();
    let mut call = Call::user("go");
    call.tools = vec![tool("ls")];
    let (streamed, chunks) = stream(&model, &call).await;
    let streamed = streamed.unwrap();
    assert_eq!(reasoning_of(&chunks).concat(), "Weighing the options.");
    let invoked = model.invoke(call.req()).await.unwrap();
    assert_eq!(
        without_provider_id(streamed),
        without_provider_id(invoked.clone())
    );
    assert_eq!(
        invoked.content,
        Content::Blocks(vec![json!({
            "type": "reasoning",
            "id": "rs_mock_0",
            "summary": [{"type": "summary_text", "text": "Weighing the options."}],
            "encrypted_content": "gAAAA-enc",
        })])
    );
    assert_eq!(
        invoked.additional_kwargs["reasoning_content"],
        "Weighing the options."
    );
    let usage = invoked.usage_metadata.clone().unwrap();
    assert_eq!(
        usage.input_token_details,
        Some(obj(json!({"cache_read": 5})))
    );
    assert_eq!(
        usage.output_token_details,
        Some(obj(json!({"reasoning": 7})))
    );
    // Stateless reasoning asks for the encrypted state …
    assert_eq!(
        mock.requests()[0].body["include"],
        json!(["reasoning.encrypted_content"])
    );
    // … and sends it back before the call it produced.
    mock.push(ResponsesReply::text("ok"));
    model
        .invoke(
            call.then(invoked)
                .then(ToolMessage::new("call_1", "x"))
                .req(),
        )
        .await
        .unwrap();
    mock.assert_no_violations();
    let input = &mock.last_request().unwrap().body["input"];
    assert_eq!(
        input[2],
        json!({"type": "reasoning", "id": "rs_mock_0", "summary": [{"type": "summary_text", "text": "Weighing the options."}], "encrypted_content": "gAAAA-enc"})
    );
    assert_eq!(input[3]["type"], "function_call");
}

#[tokio::test]
async fn reasoning_without_encrypted_content_is_not_replayed_when_nothing_is_stored() {
    let mock = MockResponses::start().await;
    let mut cfg = Responses::config(&mock);
    cfg.wire.extra = obj(json!({"store": false}));
    let model = ResponsesModel::new(cfg).unwrap();
    let answer = AiMessage {
        content: Content::Blocks(vec![
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
            json!({"type": "text", "text": "Hi."}),
        ]),
        ..Default::default()
    };
    model
        .invoke(Call::user("a").then(answer).then(Message::human("b")).req())
        .await
        .unwrap();
    mock.assert_no_violations();
    assert_eq!(
        mock.last_request().unwrap().body["input"],
        json!([
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "b"},
        ])
    );
}

#[tokio::test]
async fn incomplete_responses_map_to_length_and_content_filter() {
    let mock = MockResponses::start().await.with_replies([
        ResponsesReply::text("cut sh").incomplete("max_output_tokens"),
        ResponsesReply::text("").incomplete("content_filter"),
    ]);
    let model = Responses::model(&mock);
    let (length, _) = stream(&model, &Call::user("x")).await;
    let length = length.unwrap();
    assert_eq!(length.finish_reason(), Some("length"));
    assert_eq!(length.response_metadata["status"], "incomplete");
    assert_eq!(
        length.response_metadata["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    let filtered = model.invoke(Call::user("x").req()).await.unwrap();
    assert_eq!(filtered.finish_reason(), Some("content_filter"));
}

#[tokio::test]
async fn a_failed_response_event_is_a_stream_error() {
    let raw = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n\
               event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model crashed\"}}}\n\n";
    let mock = MockResponses::start()
        .await
        .with_replies([ResponsesReply::raw_body(200, raw)]);
    let (res, _) = stream(&Responses::model(&mock), &Call::user("x")).await;
    let err = res.unwrap_err();
    assert!(
        err.to_string().contains("server_error: The model crashed"),
        "{err}"
    );
    assert!(err.is_transient());
}

#[tokio::test]
async fn call_settings_rename_and_tool_choice_maps() {
    let mock = MockResponses::start().await;
    let model = Responses::model(&mock);
    let mut call = Call::user("x");
    call.tools = vec![tool("ls")];
    call.tool_choice = Some(json!({"name": "ls"}));
    call.settings = obj(
        json!({"max_tokens": 64, "reasoning_effort": "high", "stream_options": {"include_usage": true}}),
    );
    let body = sent_body(&model, &mock, &call).await;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "ls"})
    );
    assert_eq!(body["max_output_tokens"], 64);
    assert_eq!(body["reasoning"], json!({"effort": "high"}));
    assert_eq!(body.get("max_tokens"), None);
    assert_eq!(body.get("stream_options"), None);
}

#[tokio::test]
async fn streamed_and_unstreamed_text_fold_alike_across_tiny_writes() {
    let reply = || {
        ResponsesReply::text("one two three")
            .usage(5, 3)
            .sse_fragment_size(9)
    };
    let mock = MockResponses::start()
        .await
        .with_replies([reply(), reply()]);
    let [invoked, streamed] = both(&Responses::model(&mock), &Call::user("count")).await;
    assert_eq!(without_provider_id(streamed), without_provider_id(invoked));
}
