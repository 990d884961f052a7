//! `mock_openai`: the mock model server ([`antler_test_support::MockServer`]) as a standalone
//! process, with a scripted conversation chosen by what the user last said — for end-to-end tests
//! that run the real `antler` binary (the langgraph-sdk client test, the `antler serve` load
//! test).
//!
//! ```text
//! mock_openai [--wire openai|anthropic] [--latency-ms N] [--chunk-delay-ms N] [--port-file PATH]
//! ```
//! Binds a free port on 127.0.0.1, prints the `base_url` to configure on stdout
//! (`http://127.0.0.1:PORT/v1` for OpenAI, the default; `http://127.0.0.1:PORT` for Anthropic)
//! and the port into `--port-file`, then serves until killed. Replies, by the last user message (date reminders skipped):
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

use antler_test_support::{
    AnthropicReply, AnthropicWire, MockReply, MockServer, MockWire, OpenAiWire, Reply,
};
use serde_json::{json, Value};

#[derive(Clone, Copy)]
enum Wire {
    OpenAi,
    Anthropic,
}

struct Args {
    wire: Wire,
    latency: Duration,
    chunk_delay: Duration,
    port_file: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        wire: Wire::OpenAi,
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
            "--wire" => {
                args.wire = match value()?.as_str() {
                    "openai" => Wire::OpenAi,
                    "anthropic" => Wire::Anthropic,
                    other => return Err(format!("--wire: unknown wire {other}")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// What the script reads from a request and how it calls a tool, in one vendor's shapes.
trait Conversation: MockWire {
    /// The output of the tool result that ends the history, when one does.
    fn tool_output(last: &Value) -> Option<String>;
    /// The text of a user message, when `msg` is one (tool results excluded).
    fn user_text(msg: &Value) -> Option<String>;
    fn tool_call(id: &str, name: &str, args: Value) -> Reply<Self>;
}

/// The text of a message's content: a string, or the `text` of its parts / blocks.
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

fn role(msg: &Value) -> Option<&str> {
    msg.get("role").and_then(Value::as_str)
}

fn content(msg: &Value) -> &Value {
    msg.get("content").unwrap_or(&Value::Null)
}

impl Conversation for OpenAiWire {
    fn tool_output(last: &Value) -> Option<String> {
        (role(last) == Some("tool")).then(|| text_of(content(last)))
    }

    fn user_text(msg: &Value) -> Option<String> {
        (role(msg) == Some("user")).then(|| text_of(content(msg)))
    }

    fn tool_call(id: &str, name: &str, args: Value) -> MockReply {
        MockReply::tool_call(id, name, args)
    }
}

/// A user turn's `tool_result` blocks.
fn tool_results(msg: &Value) -> Vec<&Value> {
    match content(msg) {
        Value::Array(blocks) if role(msg) == Some("user") => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .collect(),
        _ => Vec::new(),
    }
}

impl Conversation for AnthropicWire {
    fn tool_output(last: &Value) -> Option<String> {
        tool_results(last).last().map(|r| text_of(content(r)))
    }

    fn user_text(msg: &Value) -> Option<String> {
        (role(msg) == Some("user") && tool_results(msg).is_empty()).then(|| text_of(content(msg)))
    }

    fn tool_call(id: &str, name: &str, args: Value) -> AnthropicReply {
        AnthropicReply::tool_use(id, name, args)
    }
}

/// Pick the answer for one chat request.
fn reply_for<W: Conversation>(body: &Value, chunk_delay: Duration) -> Reply<W> {
    let text = |t: &str| Reply::<W>::answer(W::text(t));
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
        return text("Mock conversation").usage(20, 3);
    }
    if let Some(out) = messages.last().and_then(W::tool_output) {
        let first_line = out.lines().next().unwrap_or("").to_owned();
        return text(&format!("The tool answered: {first_line}")).usage(120, 9);
    }
    let said = messages
        .iter()
        .rev()
        .filter_map(W::user_text)
        .find(|t| !t.trim_start().starts_with("<system-reminder>"))
        .map(|t| unframe(&t).to_owned())
        .unwrap_or_default();
    let lower = said.to_lowercase();
    if lower.contains("list") {
        W::tool_call(
            "call_ls_1",
            "ls",
            json!({"description": "List the workspace", "path": "/mnt/user-data/workspace"}),
        )
        .usage(100, 12)
    } else if lower.contains("book") || lower.contains("clarify") {
        W::tool_call(
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
        text(&words.join(" "))
            .chunk_delay(chunk_delay.max(Duration::from_millis(25)))
            .usage(50, 400)
    } else {
        text(&format!("Hello from the mock model. You said: {said}"))
            .chunk_delay(chunk_delay)
            .usage(40, 12)
    }
}

/// The user's text without the `--- BEGIN/END USER INPUT ---` frame InputSanitization puts
/// around it, read through as a real model would.
fn unframe(text: &str) -> &str {
    let t = text.trim();
    t.strip_prefix("--- BEGIN USER INPUT ---")
        .and_then(|rest| rest.strip_suffix("--- END USER INPUT ---"))
        .map_or(t, str::trim)
}

/// Serve `W` until killed: every answer comes from the script (nothing is queued).
async fn serve<W: Conversation>(args: &Args) {
    let mock = MockServer::<W>::start().await;
    let latency = args.latency;
    let chunk_delay = args.chunk_delay;
    mock.set_fallback(move |body| reply_for::<W>(body, chunk_delay).delay(latency));
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
        match args.wire {
            Wire::OpenAi => serve::<OpenAiWire>(&args).await,
            Wire::Anthropic => serve::<AnthropicWire>(&args).await,
        }
    });
}
