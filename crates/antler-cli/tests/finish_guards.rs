//! The terminal-answer guards end to end through `antler run` (spec 30 §TerminalResponse,
//! §ModelLengthFinishReason, §SafetyFinishReason): a length-capped answer is kept and reported
//! for every provider's spelling of the signal; a content-filtered tool call never runs and the
//! user gets an explanation; an empty answer after tools is retried once, then answered with a
//! visible error fallback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::{
    AnthropicReply, GeminiPart, GeminiReply, MockAnthropic, MockGemini, MockOllama, MockOpenAi,
    MockReply, MockResponses, MockServer, MockWire, OllamaReply, ResponsesReply,
};
use common::{
    as_text, custom_event, kinds, ls_call, ok_jsonl, scripted, visible, Project, FILE_TOOLS,
};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn last_ai(out: &Value) -> Value {
    visible(&out["values"])
        .into_iter()
        .rev()
        .find(|m| m["type"] == "ai")
        .unwrap()
}

/// The run succeeded, kept the partial text and reported the cap.
fn assert_capped(out: &Value, stderr: &str, provider: &str) {
    assert_eq!(out["status"], "success", "{provider}: {out}\n{stderr}");
    assert_eq!(
        last_ai(out)["content"],
        "The first half of the answer",
        "{provider}"
    );
    assert_eq!(
        out["stop_reason"], "model_length_capped",
        "{provider}: {out}"
    );
}

const PARTIAL: &str = "The first half of the answer";

#[test]
fn a_length_capped_answer_is_kept_and_reported_for_every_provider() {
    // OpenAI-compatible, streamed and not: finish_reason length.
    for streaming in [false, true] {
        let mock = MockOpenAi::start_on_thread()
            .with_replies([MockReply::text(PARTIAL).finish_reason("length")]);
        let p = Project::new(&mock, &format!("    streaming: {streaming}\n"));
        let (code, out, stderr) = p.run_json(&["write an essay"]);
        assert_eq!(code, 0, "{stderr}");
        assert_capped(&out, &stderr, "openai");
    }
    // Every other provider, streamed and not (the stream's last event carries the reason).
    for streaming in [false, true] {
        for provider in ["anthropic", "gemini", "ollama", "responses"] {
            let (_mock, models) = capped_provider(provider, streaming);
            let p = Project::with_models(&models);
            let (code, out, stderr) = p.run_json(&["write an essay"]);
            assert_eq!(code, 0, "{provider}: {stderr}");
            assert_capped(&out, &stderr, provider);
            if provider == "anthropic" {
                assert_eq!(
                    last_ai(&out)["response_metadata"]["stop_reason"],
                    "max_tokens"
                );
            }
        }
    }
}

/// A mock of `provider` whose answer is cut at the length cap in that provider's words (kept
/// alive by the caller), and the `models:` entry pointing at it.
fn capped_provider(provider: &str, streaming: bool) -> (Box<dyn std::any::Any>, String) {
    fn keep<W: MockWire + 'static>(m: MockServer<W>) -> (Box<dyn std::any::Any>, String) {
        let url = m.base_url();
        (Box::new(m), url)
    }
    let (mock, base_url) = match provider {
        // Anthropic: stop_reason max_tokens.
        "anthropic" => keep(
            MockAnthropic::start_on_thread()
                .with_replies([AnthropicReply::text(PARTIAL).stop_reason("max_tokens")]),
        ),
        // Gemini: finish_reason MAX_TOKENS.
        "gemini" => keep(
            MockGemini::start_on_thread()
                .with_replies([GeminiReply::text(PARTIAL).finish_reason("MAX_TOKENS")]),
        ),
        // Ollama: done_reason length.
        "ollama" => keep(
            MockOllama::start_on_thread()
                .with_replies([OllamaReply::text(PARTIAL).done_reason("length")]),
        ),
        // Responses API: status incomplete, incomplete_details.reason max_output_tokens.
        _ => keep(
            MockResponses::start_on_thread()
                .with_replies([ResponsesReply::text(PARTIAL).incomplete("max_output_tokens")]),
        ),
    };
    let entry = match provider {
        "anthropic" => "  - name: claude\n    use: langchain_anthropic:ChatAnthropic\n    model: claude-test\n    base_url: {url}\n    api_key: $MOCK_KEY\n    max_tokens: 64\n",
        "gemini" => "  - name: gemini\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-flash\n    api_key: k\n    base_url: {url}\n",
        "ollama" => "  - name: local\n    use: langchain_ollama:ChatOllama\n    model: qwen3:8b\n    base_url: {url}\n",
        _ => "  - name: gpt\n    use: langchain_openai:ChatOpenAI\n    model: gpt-5\n    api_key: $MOCK_KEY\n    base_url: {url}\n    use_responses_api: true\n",
    };
    let models = entry.replace("{url}", &base_url) + &format!("    streaming: {streaming}\n");
    (mock, models)
}

#[test]
fn text_output_says_a_capped_answer_is_incomplete() {
    let mock = MockOpenAi::start_on_thread()
        .with_replies([MockReply::text(PARTIAL).finish_reason("length")]);
    let p = Project::new(&mock, "");
    let out = p.run(&["run", "write an essay"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), PARTIAL);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("output token limit") && stderr.contains("model_length_capped"),
        "{stderr}"
    );
}

fn write_args() -> Value {
    json!({"description": "save", "path": "/mnt/user-data/workspace/notes.txt", "content": "half of the"})
}

fn notes(p: &Project, out: &Value) -> std::path::PathBuf {
    p.home()
        .join("threads")
        .join(out["thread_id"].as_str().unwrap())
        .join("user-data/workspace/notes.txt")
}

#[test]
fn a_content_filtered_tool_call_never_runs_and_the_user_is_told() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::tool_call(
        "call_w",
        "write_file",
        write_args(),
    )
    .finish_reason("content_filter")]);
    let p = Project::with_models(&format!(
        "  - name: main\n    use: langchain_openai:ChatOpenAI\n    model: mock-model\n    base_url: {}\n    api_key: $MOCK_KEY\n",
        mock.base_url()
    ));
    let out = p.run(&["run", "--output", "jsonl", "write a note"]);
    let events = ok_jsonl(&out);
    let event = custom_event(&events, "safety_termination");
    assert_eq!(
        event["data"]["suppressed_tool_call_names"],
        json!(["write_file"])
    );
    assert_eq!(event["data"]["reason_value"], "content_filter");
    let values = &events
        .iter()
        .rev()
        .find(|e| e["event"] == "values")
        .unwrap()["data"];
    assert_eq!(kinds(values), ["human", "ai"]);
    let ai = visible(values)[1].clone();
    assert_eq!(ai["tool_calls"], json!([]));
    assert!(ai["additional_kwargs"].get("tool_calls").is_none());
    assert_eq!(ai["response_metadata"]["finish_reason"], "content_filter");
    assert!(
        ai["content"].as_str().unwrap().contains("safety signal"),
        "{ai}"
    );
    assert_eq!(
        ai["additional_kwargs"]["safety_termination"]["suppressed_tool_call_count"],
        1
    );
    // One model call, and the truncated write never happened.
    assert_eq!(mock.requests().len(), 1);
    let thread = event["data"]["thread_id"].as_str().unwrap();
    assert!(!thread.is_empty());
    assert!(!p
        .home()
        .join("threads")
        .join(thread)
        .join("user-data/workspace/notes.txt")
        .exists());
}

#[test]
fn an_empty_safety_stop_is_explained_not_persisted_empty() {
    // Gemini blocks with a function call half-written, then an empty SAFETY answer.
    let mock = MockGemini::start_on_thread().with_replies([
        GeminiReply::parts([GeminiPart::function_call("write_file", write_args())])
            .finish_reason("SAFETY"),
        GeminiReply::text("").finish_reason("SAFETY"),
    ]);
    let p = Project::with_models(&format!(
        "  - name: gemini\n    use: langchain_google_genai:ChatGoogleGenerativeAI\n    model: gemini-2.5-flash\n    api_key: k\n    base_url: {}\n",
        mock.base_url()
    ));
    let (code, out, stderr) = p.run_json(&["write a note"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["stop_reason"], "safety_capped");
    assert!(!notes(&p, &out).exists());
    let ai = last_ai(&out);
    assert_eq!(ai["tool_calls"], json!([]));
    assert!(
        ai["content"].as_str().unwrap().contains("were not run"),
        "{ai}"
    );
    // The thread goes on: the next turn's empty answer is backfilled, never stored empty.
    let thread = out["thread_id"].as_str().unwrap().to_owned();
    let (code, out, stderr) = p.run_json(&["--thread-id", &thread, "try again"]);
    assert_eq!(code, 0, "{stderr}");
    let ai = last_ai(&out);
    assert!(
        as_text(&ai["content"]).contains("returned no content"),
        "{ai}"
    );
    assert_eq!(mock.requests().len(), 2);
}

/// A run that lists the workspace, gets an empty answer, then `second` (after the retry).
fn after_an_empty_answer(second: &str) -> (MockOpenAi, Value) {
    let (mock, p) = scripted(
        [
            ls_call("call_l", "list", "/mnt/user-data/workspace"),
            MockReply::text(""),
            MockReply::text(second),
        ],
        FILE_TOOLS,
    );
    let (code, out, stderr) = p.run_json(&["what is in the workspace?"]);
    assert_eq!(code, 0, "{stderr}");
    (mock, out)
}

#[test]
fn an_empty_answer_after_tools_is_retried_once_with_a_hidden_nudge() {
    let (mock, out) = after_an_empty_answer("The workspace is empty.");
    assert_eq!(out["status"], "success", "{out}");
    assert_eq!(kinds(&out["values"]), ["human", "ai", "tool", "ai"]);
    assert_eq!(last_ai(&out)["content"], "The workspace is empty.");
    let all = out["values"]["messages"].as_array().unwrap();
    assert!(!all
        .iter()
        .any(|m| m["name"] == "terminal_response_recovery"));
    assert!(!all
        .iter()
        .any(|m| m["type"] == "ai" && m["content"] == "" && m["tool_calls"] == json!([])));
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    let nudge = reqs[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(nudge["role"], "user");
    assert!(
        as_text(&nudge["content"]).contains("<system_reminder>"),
        "{nudge}"
    );
    // The retry request no longer carries the empty answer.
    let assistants = reqs[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(assistants, 1);
    mock.assert_no_violations();
}

#[test]
fn a_second_empty_answer_ends_the_run_with_a_visible_error_fallback() {
    let (mock, out) = after_an_empty_answer("");
    assert_eq!(out["status"], "error");
    assert_eq!(
        out["error"],
        "Model returned an empty terminal response after one retry"
    );
    let ai = last_ai(&out);
    assert!(
        as_text(&ai["content"])
            .starts_with("The model completed the tool run but returned no final response"),
        "{ai}"
    );
    assert_eq!(ai["additional_kwargs"]["deerflow_error_fallback"], true);
    assert_eq!(mock.requests().len(), 3);
}
