//! Renderers of a run's event stream: `text` (tokens as they arrive, one line per tool call and
//! per tool outcome), `jsonl` (one LangGraph-named event per line) and `json` (nothing while
//! running; the final object is printed by the caller).

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};

use antler_protocol::{Message, StreamEvent, StreamMessage, StreamModes, ToolStatus};
use antler_runtime::{EventSink, Held};
use serde_json::{json, Value};

/// `--output` formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
    Jsonl,
}

/// The start of a listing command's answer: the items as one JSON array (any output but text)
/// or the `empty` note. `true` when that was all; `false` when the text table is still to print.
#[allow(clippy::print_stdout)]
pub(crate) fn listed_without_table<T>(
    output: OutputFormat,
    items: &[T],
    to_json: impl Fn(&T) -> Value,
    empty: &str,
) -> bool {
    if output != OutputFormat::Text {
        let v: Vec<Value> = items.iter().map(to_json).collect();
        println!("{}", Value::Array(v));
        return true;
    }
    if items.is_empty() {
        println!("{empty}");
        return true;
    }
    false
}

/// Longest tool argument/result preview on a progress line.
const PREVIEW_CHARS: usize = 100;

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| {
            if c == '\n' || c == '\r' || c == '\t' {
                ' '
            } else {
                c
            }
        })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        flat.to_owned()
    }
}

/// The most telling argument of a tool call, for its progress line.
fn call_summary(args: &serde_json::Map<String, Value>) -> String {
    for key in [
        "command",
        "path",
        "pattern",
        "query",
        "url",
        "prompt",
        "question",
        "filepaths",
    ] {
        if let Some(v) = args.get(key) {
            return match v {
                Value::String(s) => one_line(s, PREVIEW_CHARS),
                other => one_line(&other.to_string(), PREVIEW_CHARS),
            };
        }
    }
    one_line(&Value::Object(args.clone()).to_string(), PREVIEW_CHARS)
}

struct TextState {
    /// AI message ids whose text already streamed.
    streamed: HashSet<String>,
    /// Whether stdout is mid-line.
    mid_line: bool,
    in_reasoning: bool,
}

/// Human output: assistant text on stdout, tool activity on stderr.
pub struct TextRenderer<O: Write + Send, E: Write + Send> {
    out: Mutex<(O, E, TextState)>,
}

impl<O: Write + Send, E: Write + Send> TextRenderer<O, E> {
    pub fn new(out: O, err: E) -> Self {
        TextRenderer {
            out: Mutex::new((
                out,
                err,
                TextState {
                    streamed: HashSet::new(),
                    mid_line: false,
                    in_reasoning: false,
                },
            )),
        }
    }

    /// End the current line of streamed text, if any.
    pub fn finish(&self) {
        if let Ok(mut g) = self.out.lock() {
            let (out, _, st) = &mut *g;
            if st.mid_line {
                let _ = writeln!(out);
                st.mid_line = false;
            }
            let _ = out.flush();
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> Option<(O, E)> {
        self.out.into_inner().ok().map(|(o, e, _)| (o, e))
    }
}

impl<O: Write + Send, E: Write + Send> EventSink for TextRenderer<O, E> {
    fn modes(&self) -> StreamModes {
        StreamModes {
            values: false,
            updates: true,
            messages: true,
            custom: true,
        }
    }

    fn emit(&self, event: StreamEvent) {
        let Ok(mut g) = self.out.lock() else { return };
        let (out, err, st) = &mut *g;
        match event {
            StreamEvent::Messages {
                message: StreamMessage::AiChunk(chunk),
                ..
            } => {
                if let Some(r) = chunk
                    .additional_kwargs
                    .get("reasoning_content")
                    .and_then(Value::as_str)
                {
                    if !st.in_reasoning {
                        let _ = write!(err, "[thinking] ");
                        st.in_reasoning = true;
                    }
                    let _ = write!(err, "{r}");
                    let _ = err.flush();
                }
                let text = chunk.content.text();
                if !text.is_empty() {
                    if st.in_reasoning {
                        let _ = writeln!(err);
                        st.in_reasoning = false;
                    }
                    if let Some(id) = &chunk.id {
                        st.streamed.insert(id.clone());
                    }
                    let _ = write!(out, "{text}");
                    let _ = out.flush();
                    st.mid_line = !text.ends_with('\n');
                }
            }
            StreamEvent::Messages {
                message: StreamMessage::Tool(tm),
                ..
            } => {
                let name = tm.name.as_deref().unwrap_or("tool");
                let mark = match tm.status {
                    ToolStatus::Success => "✓",
                    ToolStatus::Error => "✗",
                };
                let _ = writeln!(
                    err,
                    "  {mark} {name}: {}",
                    one_line(&tm.content.text(), PREVIEW_CHARS)
                );
            }
            StreamEvent::Updates { node, update } if node == "model" => {
                for m in update.messages.iter().flatten() {
                    let Message::Ai(ai) = m else { continue };
                    let id = ai.id.clone().unwrap_or_default();
                    // Models that did not stream: print the answer now.
                    if !st.streamed.contains(&id) {
                        let text = ai.content.text();
                        if !text.is_empty() {
                            let _ = write!(out, "{text}");
                            st.mid_line = !text.ends_with('\n');
                        }
                    }
                    if st.mid_line && !ai.tool_calls.is_empty() {
                        let _ = writeln!(out);
                        st.mid_line = false;
                    }
                    let _ = out.flush();
                    if st.in_reasoning {
                        let _ = writeln!(err);
                        st.in_reasoning = false;
                    }
                    for call in &ai.tool_calls {
                        let _ = writeln!(err, "  → {}({})", call.name, call_summary(&call.args));
                    }
                    for bad in &ai.invalid_tool_calls {
                        let _ = writeln!(
                            err,
                            "  ✗ {}: invalid tool call: {}",
                            bad.name.as_deref().unwrap_or("?"),
                            one_line(bad.error.as_deref().unwrap_or(""), PREVIEW_CHARS)
                        );
                    }
                }
            }
            StreamEvent::Custom(v)
                if v.get("type").and_then(Value::as_str) == Some("tool_progress") =>
            {
                // A running tool's live output, indented under its call line.
                let message = v.get("message").and_then(Value::as_str).unwrap_or("");
                let _ = writeln!(err, "    ┆ {}", one_line(message, PREVIEW_CHARS * 2));
            }
            StreamEvent::Custom(v)
                if v.get("type").and_then(Value::as_str) == Some("task_running") =>
            {
                // A subagent's step: its tool calls, else its text.
                let step = v.get("message").cloned().unwrap_or(Value::Null);
                let calls: Vec<String> = step
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| {
                        let name = c.get("name")?.as_str()?;
                        let args = c.get("args").and_then(Value::as_object);
                        Some(format!(
                            "→ {name}({})",
                            args.map(call_summary).unwrap_or_default()
                        ))
                    })
                    .collect();
                let text = if calls.is_empty() {
                    match step.get("content") {
                        Some(Value::String(s)) => s.clone(),
                        _ => String::new(),
                    }
                } else {
                    calls.join(", ")
                };
                if !text.trim().is_empty() {
                    let _ = writeln!(
                        err,
                        "    ┆ subagent: {}",
                        one_line(&text, PREVIEW_CHARS * 2)
                    );
                }
            }
            StreamEvent::Custom(v) => {
                if let Some(kind) = v.get("type").and_then(Value::as_str) {
                    let detail = v
                        .get("message")
                        .or_else(|| v.get("description"))
                        .and_then(Value::as_str)
                        .map(|s| format!(": {}", one_line(s, PREVIEW_CHARS)))
                        .unwrap_or_default();
                    let _ = writeln!(err, "  · {kind}{detail}");
                }
            }
            _ => {}
        }
    }
}

/// One JSON object per line: `{"event": <name>, "data": <data>}`.
pub struct JsonlRenderer<O: Write + Send> {
    out: Arc<Mutex<O>>,
}

impl<O: Write + Send> JsonlRenderer<O> {
    pub fn new(out: O) -> Self {
        JsonlRenderer {
            out: Arc::new(Mutex::new(out)),
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> Option<O> {
        Arc::try_unwrap(self.out).ok()?.into_inner().ok()
    }
}

fn jsonl_line(event: &StreamEvent) -> String {
    // A `values` event's state is written straight out: building its `Value` first would
    // allocate a node per field of every message of the history.
    if let StreamEvent::Values(state) = event {
        let mut line = String::from(r#"{"event":"values","data":"#);
        if let Ok(data) = serde_json::to_string(state) {
            line.push_str(&data);
            line.push('}');
            return line;
        }
    }
    json!({"event": event.name(), "data": event.data()}).to_string()
}

fn write_line<O: Write>(out: &Mutex<O>, line: &str) {
    if let Ok(mut out) = out.lock() {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

impl<O: Write + Send + 'static> EventSink for JsonlRenderer<O> {
    fn modes(&self) -> StreamModes {
        StreamModes::ALL
    }

    fn emit(&self, event: StreamEvent) {
        write_line(&self.out, &jsonl_line(&event));
    }

    /// The line is rendered now and written on release: a held `values` snapshot would
    /// otherwise share the run's message list until then, and the run's next in-place write
    /// would copy the whole list.
    fn hold(&self, event: StreamEvent) -> Held {
        let line = jsonl_line(&event);
        drop(event);
        let out = self.out.clone();
        Held::Prepared(Box::new(move || write_line(&out, &line)))
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
