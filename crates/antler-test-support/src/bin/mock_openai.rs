//! `mock_openai`: the [`antler_test_support::MockOpenAi`] server as a standalone process, with a
//! scripted conversation chosen by what the user last said — for end-to-end tests that run the
//! real `antler` binary (the langgraph-sdk client test, the `antler serve` load test).
//!
//! ```text
//! mock_openai [--latency-ms N] [--chunk-delay-ms N] [--port-file PATH]
//! ```
//! Binds a free port on 127.0.0.1, prints `http://127.0.0.1:PORT/v1` on stdout (and the port
//! into `--port-file`), then serves until killed. Replies, by the last user message (date reminders skipped):
//! - after a tool result: a text answer mentioning the tool's output;
//! - "list …": an `ls` call on `/mnt/user-data/workspace` (arguments streamed in pieces);
//! - "book …" / "clarify …": an `ask_clarification` call with two options;
//! - "slow …": 400 words, one chunk every `--chunk-delay-ms` (at least 25 ms) — for cancel tests;
//! - anything else: `Hello from the mock model. You said: <text>`.
//!
//! Requests without tools (title, summary, memory calls) get a short plain answer. Every answer
//! waits `--latency-ms` first.

use std::io::Write;
use std::time::Duration;

use antler_test_support::{MockOpenAi, MockReply};
use serde_json::{json, Value};

struct Args {
    latency: Duration,
    chunk_delay: Duration,
    port_file: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        latency: Duration::ZERO,
        chunk_delay: Duration::ZERO,
        port_file: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--latency-ms" => {
                args.latency = Duration::from_millis(
                    value()?.parse().map_err(|e| format!("--latency-ms: {e}"))?,
                )
            }
            "--chunk-delay-ms" => {
                args.chunk_delay = Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|e| format!("--chunk-delay-ms: {e}"))?,
                )
            }
            "--port-file" => args.port_file = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// The text of an OpenAI message's content (string or parts).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Pick the answer for one chat request.
fn reply_for(body: &Value, chunk_delay: Duration) -> MockReply {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has_tools = body
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    if !has_tools {
        return MockReply::text("Mock conversation").usage(20, 3);
    }
    if let Some(last) = messages.last() {
        if last.get("role").and_then(Value::as_str) == Some("tool") {
            let out = text_of(last.get("content").unwrap_or(&Value::Null));
            let first_line = out.lines().next().unwrap_or("").to_owned();
            return MockReply::text(format!("The tool answered: {first_line}")).usage(120, 9);
        }
    }
    let said = messages
        .iter()
        .rev()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
        .find(|t| !t.trim_start().starts_with("<system-reminder>"))
        .unwrap_or_default();
    let lower = said.to_lowercase();
    if lower.contains("list") {
        MockReply::tool_call(
            "call_ls_1",
            "ls",
            json!({"description": "List the workspace", "path": "/mnt/user-data/workspace"}),
        )
        .usage(100, 12)
    } else if lower.contains("book") || lower.contains("clarify") {
        MockReply::tool_call(
            "call_q9",
            "ask_clarification",
            json!({
                "question": "Which date and destination?",
                "clarification_type": "missing_info",
                "options": ["Tomorrow to Tokyo", "Next week to Paris"],
            }),
        )
        .usage(100, 20)
    } else if lower.contains("slow") {
        let words: Vec<String> = (0..400).map(|i| format!("word{i}")).collect();
        MockReply::text(words.join(" "))
            .chunk_delay(chunk_delay.max(Duration::from_millis(25)))
            .usage(50, 400)
    } else {
        MockReply::text(format!("Hello from the mock model. You said: {said}"))
            .chunk_delay(chunk_delay)
            .usage(40, 12)
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mock_openai: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mock_openai: no runtime: {e}");
            std::process::exit(1);
        }
    };
    rt.block_on(async move {
        let mock = MockOpenAi::start().await;
        let latency = args.latency;
        let chunk_delay = args.chunk_delay;
        mock.set_fallback(move |body| reply_for(body, chunk_delay).delay(latency));
        // Nothing is queued: every answer comes from the fallback.
        let url = mock.base_url();
        let _ = writeln!(std::io::stdout(), "{url}");
        let _ = std::io::stdout().flush();
        if let Some(path) = &args.port_file {
            if let Err(e) = std::fs::write(path, format!("{}\n", mock.addr().port())) {
                let _ = writeln!(std::io::stderr(), "mock_openai: cannot write {path}: {e}");
                std::process::exit(1);
            }
        }
        std::future::pending::<()>().await;
    });
}
