//! Scripted answers of [`crate::MockResponses`] ([`ResponsesReply`] constructors in the
//! Responses API's terms) and their rendering: one `response` object, or the streamed events —
//! `response.created`, `response.in_progress`, per output item `response.output_item.added`, its
//! deltas (`response.reasoning_summary_text.delta`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`) and `response.output_item.done`, then
//! `response.completed` (or `response.incomplete`) carrying the whole response and its usage.

use serde_json::{json, Value};

use super::ResponsesReply;
pub(crate) use crate::mock::IdRender as Render;
use crate::mock::{split_even, split_text, MockAnswer, MockUsage};

/// One output item of a scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ResponsesItem {
    /// A reasoning item: its summary text and, when set, the `encrypted_content` the API returns
    /// with `include: ["reasoning.encrypted_content"]`.
    Reasoning {
        summary: String,
        encrypted_content: Option<String>,
    },
    /// An assistant `message` with one `output_text` part.
    Text(String),
    /// A `function_call`; `arguments` is the JSON text, sent verbatim.
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl ResponsesItem {
    pub fn text(text: impl Into<String>) -> Self {
        ResponsesItem::Text(text.into())
    }

    pub fn reasoning(summary: impl Into<String>, encrypted_content: Option<&str>) -> Self {
        ResponsesItem::Reasoning {
            summary: summary.into(),
            encrypted_content: encrypted_content.map(str::to_owned),
        }
    }

    /// `args` is serialized, except a JSON string which is used verbatim as the arguments text.
    pub fn function_call(call_id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        ResponsesItem::FunctionCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments: match args {
                Value::String(s) => s,
                other => other.to_string(),
            },
        }
    }

    fn len(&self) -> usize {
        match self {
            ResponsesItem::Reasoning { summary, .. } => summary.len(),
            ResponsesItem::Text(t) => t.len(),
            ResponsesItem::FunctionCall {
                name, arguments, ..
            } => name.len() + arguments.len(),
        }
    }

    /// The complete item; `n` numbers the item ids.
    fn json(&self, n: usize) -> Value {
        match self {
            ResponsesItem::Reasoning {
                summary,
                encrypted_content,
            } => {
                let mut item = json!({
                    "type": "reasoning",
                    "id": format!("rs_mock_{n}"),
                    "summary": [{"type": "summary_text", "text": summary}],
                });
                if let Some(enc) = encrypted_content {
                    item["encrypted_content"] = json!(enc);
                }
                item
            }
            ResponsesItem::Text(text) => json!({
                "type": "message",
                "id": format!("msg_mock_{n}"),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }),
            ResponsesItem::FunctionCall {
                call_id,
                name,
                arguments,
            } => json!({
                "type": "function_call",
                "id": format!("fc_mock_{n}"),
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }),
        }
    }
}

/// A scripted response in the Responses API's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponsesAnswer {
    items: Vec<ResponsesItem>,
    usage: Option<MockUsage>,
    /// `Some(reason)`: status `incomplete` with `incomplete_details.reason`.
    incomplete: Option<String>,
}

impl ResponsesAnswer {
    pub(crate) fn new(items: Vec<ResponsesItem>) -> Self {
        ResponsesAnswer {
            items,
            usage: None,
            incomplete: None,
        }
    }

    fn usage_json(&self, r: &Render) -> Value {
        let u = MockUsage::or_estimate(self.usage, r.prompt_bytes, || {
            self.items.iter().map(ResponsesItem::len).sum()
        });
        json!({
            "input_tokens": u.input,
            "input_tokens_details": {"cached_tokens": u.cached},
            "output_tokens": u.output,
            "output_tokens_details": {"reasoning_tokens": u.reasoning},
            "total_tokens": u.input + u.output,
        })
    }
}

impl MockAnswer for ResponsesAnswer {
    type Render = Render;

    fn message(&self, r: &Render) -> Value {
        let output: Vec<Value> = self
            .items
            .iter()
            .enumerate()
            .map(|(n, item)| item.json(n))
            .collect();
        let (status, details) = match &self.incomplete {
            Some(reason) => ("incomplete", json!({"reason": reason})),
            None => ("completed", Value::Null),
        };
        json!({
            "id": r.id,
            "object": "response",
            "created_at": 1_700_000_000u64,
            "status": status,
            "error": null,
            "incomplete_details": details,
            "model": r.model,
            "output": output,
            "parallel_tool_calls": true,
            "usage": self.usage_json(r),
        })
    }

    fn events(&self, r: &Render) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        let mut shell = self.message(r);
        shell["status"] = json!("in_progress");
        shell["output"] = json!([]);
        shell["usage"] = Value::Null;
        out.push(json!({"type": "response.created", "response": shell.clone()}));
        out.push(json!({"type": "response.in_progress", "response": shell}));
        for (n, item) in self.items.iter().enumerate() {
            let done = item.json(n);
            let id = done["id"].clone();
            let mut added = done.clone();
            match item {
                ResponsesItem::Reasoning { summary, .. } => {
                    added["summary"] = json!([]);
                    out.push(json!({"type": "response.output_item.added", "output_index": n, "item": added}));
                    out.push(json!({"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": n, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}));
                    for piece in split_text(summary) {
                        out.push(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": n, "summary_index": 0, "delta": piece}));
                    }
                    out.push(json!({"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": n, "summary_index": 0, "text": summary}));
                    out.push(json!({"type": "response.reasoning_summary_part.done", "item_id": id, "output_index": n, "summary_index": 0, "part": {"type": "summary_text", "text": summary}}));
                }
                ResponsesItem::Text(text) => {
                    added["content"] = json!([]);
                    added["status"] = json!("in_progress");
                    out.push(json!({"type": "response.output_item.added", "output_index": n, "item": added}));
                    out.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": n, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                    for piece in split_text(text) {
                        out.push(json!({"type": "response.output_text.delta", "item_id": id, "output_index": n, "content_index": 0, "delta": piece}));
                    }
                    out.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": n, "content_index": 0, "text": text}));
                    out.push(json!({"type": "response.content_part.done", "item_id": id, "output_index": n, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}}));
                }
                ResponsesItem::FunctionCall { arguments, .. } => {
                    added["arguments"] = json!("");
                    added["status"] = json!("in_progress");
                    out.push(json!({"type": "response.output_item.added", "output_index": n, "item": added}));
                    for piece in split_even(arguments, 3) {
                        out.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": n, "delta": piece}));
                    }
                    out.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": n, "arguments": arguments}));
                }
            }
            out.push(json!({"type": "response.output_item.done", "output_index": n, "item": done}));
        }
        let last = if self.incomplete.is_some() {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(json!({"type": last, "response": self.message(r)}));
        for (seq, event) in out.iter_mut().enumerate() {
            event["sequence_number"] = json!(seq);
        }
        out
    }

    fn text(text: &str) -> Self {
        Self::new(vec![ResponsesItem::text(text)])
    }

    fn scripted_usage(&mut self) -> &mut Option<MockUsage> {
        &mut self.usage
    }
}

/// Constructors and builders in the Responses API's terms (the vendor-neutral ones are
/// [`crate::Reply`]'s).
impl ResponsesReply {
    /// A response made of `items`, in order.
    pub fn items(items: impl IntoIterator<Item = ResponsesItem>) -> Self {
        Self::answer(ResponsesAnswer::new(items.into_iter().collect()))
    }

    /// One function call (`args`: see [`ResponsesItem::function_call`]).
    pub fn function_call(call_id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        Self::items([ResponsesItem::function_call(call_id, name, args)])
    }

    /// A reasoning item (summary, optional encrypted content) followed by a text answer.
    pub fn reasoning(
        summary: impl Into<String>,
        encrypted_content: Option<&str>,
        text: impl Into<String>,
    ) -> Self {
        Self::items([
            ResponsesItem::reasoning(summary, encrypted_content),
            ResponsesItem::text(text),
        ])
    }

    /// Status `incomplete` with `incomplete_details.reason` (`max_output_tokens`,
    /// `content_filter`).
    pub fn incomplete(self, reason: impl Into<String>) -> Self {
        self.with_answer(|a| a.incomplete = Some(reason.into()))
    }

    /// `input_tokens_details.cached_tokens` and `output_tokens_details.reasoning_tokens`.
    pub fn cached_and_reasoning_tokens(self, cached: u64, reasoning: u64) -> Self {
        self.with_usage(|u| {
            u.cached = cached;
            u.reasoning = reasoning;
        })
    }

    /// The answer as a `response` object (`None` for errors, raw bodies and hangs).
    pub fn response(&self, model: &str) -> Option<Value> {
        self.answer_ref()
            .map(|a| a.message(&Render::standalone("resp_mock", model)))
    }

    /// The answer as stream events (`None` for errors, raw bodies and hangs).
    pub fn events(&self, model: &str) -> Option<Vec<Value>> {
        self.answer_ref()
            .map(|a| a.events(&Render::standalone("resp_mock", model)))
    }
}
