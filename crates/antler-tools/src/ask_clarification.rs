//! `ask_clarification` (spec 50 §4.11): the model asks the human a question and the run stops
//! until the answer arrives as the next user message.
//!
//! The lead agent's ClarificationMiddleware (innermost tool wrapper) intercepts every call, so
//! this tool's own body runs only in an agent without that middleware. Then it answers with the
//! question rendered as text — icon, context, question, options or form fields, as the
//! middleware renders its fallback text (without the structured card) — and, being
//! `return_direct`, still ends the run when it is the turn's only registered call.

use std::sync::Arc;

use antler_protocol::{Object, ToolSpec};
use antler_runtime::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::{json, Value};

/// The tool's name.
pub const NAME: &str = "ask_clarification";

/// The five kinds of clarification, in DeerFlow's order.
pub const CLARIFICATION_TYPES: &[&str] = &[
    "missing_info",
    "ambiguous_requirement",
    "approach_choice",
    "risk_confirmation",
    "suggestion",
];

/// Form field types a card can render.
pub const FIELD_TYPES: &[&str] = &[
    "text",
    "textarea",
    "number",
    "select",
    "multi_select",
    "checkbox",
    "date",
];

const DESCRIPTION: &str = "Ask the user a question and stop until they answer. Use it only when you cannot reasonably continue on your own:\n\
- information you need was not given (a path, a URL, a concrete requirement);\n\
- the request can be read in several ways that lead to different work;\n\
- several approaches are valid and the choice is the user's;\n\
- you are about to do something destructive or hard to undo (deleting files, touching production) — always confirm first;\n\
- you want to recommend something and need the user's go-ahead.\n\n\
Shape of the question: a single open question needs only `question`; to let the user pick one answer give `options`; \
to collect several values at once (or let the user pick several options) give `fields`, which renders one form — \
prefer one form to a series of questions. Ask one clarification at a time and make it specific. \
The run stops right after this call and the user's answer arrives as their next message.";

/// The `ask_clarification` tool.
pub struct AskClarificationTool {
    spec: Arc<ToolSpec>,
}

impl Default for AskClarificationTool {
    fn default() -> Self {
        Self::new()
    }
}

impl AskClarificationTool {
    pub fn new() -> Self {
        let field_item = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Unique identifier of the field (not a JavaScript prototype name such as `constructor` or `toString`)."},
                "label": {"type": "string", "description": "Text shown to the user; defaults to the name."},
                "type": {"type": "string", "enum": FIELD_TYPES, "description": "Input kind; defaults to text. A checkbox is a yes/no value that defaults to no; mark it required only when the user must tick it to go on."},
                "required": {"type": "boolean", "description": "Whether the user must fill it in; defaults to false."},
                "options": {"type": "array", "items": {"type": "string"}, "description": "Choices; needed for select and multi_select."},
                "placeholder": {"type": "string", "description": "Hint shown in the empty input."}
            },
            "required": ["name"]
        });
        let parameters = json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question for the user, specific and clear."},
                "clarification_type": {
                    "type": "string",
                    "enum": CLARIFICATION_TYPES,
                    "description": "Why you ask: missing_info, ambiguous_requirement, approach_choice, risk_confirmation or suggestion."
                },
                "context": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "default": null,
                    "description": "Optional background: why the answer is needed."
                },
                "options": {
                    "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                    "default": null,
                    "description": "Optional choices for the user to pick one from (approach_choice, suggestion)."
                },
                "fields": {
                    "anyOf": [{"type": "array", "items": field_item}, {"type": "null"}],
                    "default": null,
                    "description": "Optional form for collecting several values in one answer; wins over `options`. At most 16 fields, 24 options per field and 200 characters per name, label, option or placeholder — beyond that the question falls back to plain text."
                }
            },
            "required": ["question", "clarification_type"]
        });
        AskClarificationTool {
            spec: Arc::new(ToolSpec {
                name: NAME.to_owned(),
                description: DESCRIPTION.to_owned(),
                parameters,
            }),
        }
    }
}

/// `ask_clarification` as a registry entry.
pub fn ask_clarification_tool() -> Arc<dyn Tool> {
    Arc::new(AskClarificationTool::new())
}

fn icon(kind: Option<&str>) -> &'static str {
    match kind {
        Some("ambiguous_requirement") => "🤔",
        Some("approach_choice") => "🔀",
        Some("risk_confirmation") => "⚠️",
        Some("suggestion") => "💡",
        _ => "❓",
    }
}

/// A value as display text (strings verbatim, anything else as JSON).
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.trim().to_owned(),
        other => other.to_string(),
    }
}

/// `options` as a list: a native list, a JSON-encoded list, or a single value; blanks and
/// repeats dropped.
fn options_of(v: Option<&Value>) -> Vec<String> {
    let decoded;
    let mut v = match v {
        None | Some(Value::Null) => return Vec::new(),
        Some(v) => v,
    };
    if let Value::String(s) = v {
        if let Ok(parsed) = serde_json::from_str::<Value>(s) {
            decoded = parsed;
            v = &decoded;
        }
    }
    let items: Vec<String> = match v {
        Value::Null => Vec::new(),
        Value::Array(items) => items.iter().map(text_of).collect(),
        other => vec![text_of(other)],
    };
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !item.is_empty() && !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The question as text: icon and question (after the context when given), then the form's
/// fields or the numbered options.
pub fn render_question(args: &Object) -> String {
    let question = args.get("question").map(text_of).unwrap_or_default();
    let icon = icon(args.get("clarification_type").and_then(Value::as_str));
    let mut lines = Vec::new();
    match args
        .get("context")
        .map(text_of)
        .filter(|c| !c.is_empty() && c != "null")
    {
        Some(context) => {
            lines.push(format!("{icon} {context}"));
            lines.push(format!("\n{question}"));
        }
        None => lines.push(format!("{icon} {question}")),
    }
    let fields: Vec<&Object> = match args.get("fields") {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    };
    if !fields.is_empty() {
        lines.push(String::new());
        for (i, field) in fields.iter().enumerate() {
            let label = field
                .get("label")
                .or_else(|| field.get("name"))
                .map(text_of)
                .unwrap_or_default();
            let mut line = format!("  {}. {label}", i + 1);
            if field.get("required").and_then(Value::as_bool) == Some(true) {
                line.push_str(" (required)");
            }
            let options = options_of(field.get("options"));
            if !options.is_empty() {
                line.push_str(" — options: ");
                line.push_str(&options.join(" / "));
                if field.get("type").and_then(Value::as_str) == Some("multi_select") {
                    line.push_str(" (multiple allowed)");
                }
            }
            lines.push(line);
        }
        lines.push(String::new());
        lines.push("Please reply with a value for each field.".to_owned());
    } else {
        let options = options_of(args.get("options"));
        if !options.is_empty() {
            lines.push(String::new());
            for (i, option) in options.iter().enumerate() {
                lines.push(format!("  {}. {option}", i + 1));
            }
        }
    }
    lines.join("\n")
}

#[async_trait]
impl Tool for AskClarificationTool {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }

    fn return_direct(&self) -> bool {
        true
    }

    async fn call(&self, args: Object, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(render_question(&args)))
    }
}
