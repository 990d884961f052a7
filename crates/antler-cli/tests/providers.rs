//! `antler run` end to end against each provider a DeerFlow config names beyond the
//! OpenAI-compatible and Anthropic ones: `langchain_google_genai:ChatGoogleGenerativeAI` (Gemini
//! API), `langchain_ollama:ChatOllama` (Ollama's native `/api/chat`) and `use_responses_api:
//! true` (OpenAI Responses API). The real binary runs a tool round trip against each vendor's
//! mock on 127.0.0.1, streamed and not, and the mock checks every request (paths, key headers,
//! call/result pairing).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::{
    GeminiPart, GeminiReply, MockGemini, MockOllama, MockResponses, OllamaReply, OllamaToolCall,
    ResponsesItem, ResponsesReply,
};
use common::{kinds, visible, Project};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// `antler run "write a note"` on a project with `model_yaml`: the tool round trip must succeed
/// with the answer "Saved the note." and `usage`; returns the visible messages.
fn write_a_note(model_yaml: &str, usage: (u64, u64)) -> Vec<Value> {
    let p = Project::with_models(model_yaml);
    let (code, out, stderr) = p.run_json(&["write a note"]);
    assert_eq!(code, 0, "{stderr}");
    assert_round_trip(&p, &out, "Saved the note.", usage);
    visible(&out["values"])
}

fn write_args() -> Value {
    json!({"description": "save", "path": "/mnt/user-data/workspace/notes.txt", "content": "hello antler"})
}

/// The run's messages are human, ai (the call), tool (its result), ai (the answer); the file was
/// written; the answer carries the provider's usage.
fn assert_round_trip(p: &Project, out: &Value, answer: &str, usage: (u64, u64)) {
    assert_eq!(out["status"], "success", "{out}");
    assert_eq!(kinds(&out["values"]), ["human", "ai", "tool", "ai"]);
    let msgs = visible(&out["values"]);
    assert_eq!(msgs[1]["tool_calls"][0]["name"], "write_file");
    assert_eq!(msgs[2]["status"], "success", "{}", msgs[2]);
    assert_eq!(msgs[2]["tool_call_id"], msgs[1]["tool_calls"][0]["id"]);
    assert_eq!(msgs[3]["content"], answer);
    assert_eq!(msgs[3]["usage_metadata"]["input_tokens"], usage.0);
    assert_eq!(msgs[3]["usage_metadata"]["output_tokens"], usage.1);
    let thread = out["thread_id"].as_str().unwrap();
    let written = p
        .home()
        .join("threads")
        .join(thread)
        .join("user-data/workspace/notes.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "hello antler");
}

#[test]
fn gemini_models_run_through_generate_content() {
    for streaming in [false, true] {
        let mock = MockGemini::start_on_thread()
            .require_api_key("sk-test")
            .require_thought_signatures()
            .with_replies([
                GeminiReply::parts([
                    GeminiPart::thought("The user wants a note."),
                    GeminiPart::signed_call("write_file", write_args(), "sig-1"),
                ]),
                GeminiReply::text("Saved the note.").usage(30, 5),
            ]);
        let msgs = write_a_note(
            &format!(
                "  - name: gemini\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-pro\n    gemini_api_key: $MOCK_KEY\n    base_url: {}\n    max_tokens: 2048\n    streaming: {streaming}\n",
                mock.base_url()
            ),
            (30, 5),
        );
        assert_eq!(
            msgs[1]["additional_kwargs"]["reasoning_content"],
            "The user wants a note."
        );
        assert_eq!(msgs[3]["response_metadata"]["finish_reason"], "STOP");
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 2);
        let method = if streaming {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        assert_eq!(
            reqs[1].path,
            format!("/v1beta/models/gemini-2.5-pro:{method}")
        );
        assert_eq!(reqs[1].header("x-goog-api-key"), Some("sk-test"));
        let contents = &reqs[1].body["contents"];
        assert_eq!(contents[1]["parts"][0]["thoughtSignature"], "sig-1");
        assert_eq!(
            contents[2]["parts"][0]["functionResponse"]["name"],
            "write_file"
        );
        assert_eq!(reqs[1].body["generationConfig"]["maxOutputTokens"], 2048);
        mock.assert_no_violations();
    }
}

#[test]
fn ollama_models_run_through_api_chat() {
    for streaming in [false, true] {
        let mock = MockOllama::start_on_thread().with_replies([
            OllamaReply::tool_calls([OllamaToolCall::new("write_file", write_args())]),
            OllamaReply::thinking("Done, tell them.", "Saved the note.").usage(40, 6),
        ]);
        let msgs = write_a_note(
            &format!(
                "  - name: qwen3-local\n    use: langchain_ollama:ChatOllama\n    model: qwen3:32b\n    base_url: {}\n    num_predict: 8192\n    temperature: 0.7\n    reasoning: true\n    supports_thinking: true\n    streaming: {streaming}\n",
                mock.base_url()
            ),
            (40, 6),
        );
        assert_eq!(
            msgs[3]["additional_kwargs"]["reasoning_content"],
            "Done, tell them."
        );
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[1].path, "/api/chat");
        assert_eq!(reqs[1].is_stream(), streaming);
        assert_eq!(reqs[1].body["think"], true);
        assert_eq!(reqs[1].body["options"]["num_predict"], 8192);
        let history = reqs[1].body["messages"].as_array().unwrap();
        let tool = history.iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(tool["tool_name"], "write_file");
        mock.assert_no_violations();
    }
}

#[test]
fn use_responses_api_runs_through_v1_responses() {
    for streaming in [false, true] {
        let mock = MockResponses::start_on_thread()
            .require_api_key("sk-test")
            .with_replies([
                ResponsesReply::items([
                    ResponsesItem::reasoning("A note is asked for.", Some("enc-1")),
                    ResponsesItem::function_call("call_w", "write_file", write_args()),
                ]),
                ResponsesReply::text("Saved the note.").usage(50, 7),
            ]);
        let msgs = write_a_note(
            &format!(
                "  - name: gpt-5-responses\n    use: langchain_openai:ChatOpenAI\n    model: gpt-5\n    api_key: $MOCK_KEY\n    base_url: {}\n    use_responses_api: true\n    output_version: responses/v1\n    store: false\n    streaming: {streaming}\n",
                mock.base_url()
            ),
            (50, 7),
        );
        assert_eq!(
            msgs[1]["additional_kwargs"]["reasoning_content"],
            "A note is asked for."
        );
        assert_eq!(msgs[1]["content"][0]["encrypted_content"], "enc-1");
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[1].path, "/v1/responses");
        assert_eq!(reqs[1].header("authorization"), Some("Bearer sk-test"));
        let input = reqs[1].body["input"].as_array().unwrap();
        let kinds: Vec<&str> = input
            .iter()
            .map(|i| i["type"].as_str().unwrap_or("message"))
            .collect();
        assert_eq!(
            kinds[kinds.len() - 3..],
            ["reasoning", "function_call", "function_call_output"]
        );
        assert_eq!(input[input.len() - 3]["encrypted_content"], "enc-1");
        mock.assert_no_violations();
    }
}

#[test]
fn text_output_streams_a_gemini_answer() {
    let mock =
        MockGemini::start_on_thread().with_replies([GeminiReply::text("Hello from Gemini.")]);
    let p = Project::with_models(&format!(
        "  - name: gemini\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-flash\n    api_key: k\n    base_url: {}\n    streaming: true\n",
        mock.base_url()
    ));
    let out = p.run(&["run", "hi"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Hello from Gemini."
    );
}
