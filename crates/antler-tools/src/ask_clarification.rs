//! `ask_clarification` (spec 50 §4.11): the model asks the human a question and the run stops
//! until the answer arrives as the next user message.
//!
//! The lead agent's ClarificationMiddleware (innermost tool wrapper) intercepts every call, so
//! this tool's own body runs only in an agent without that middleware. Then it answers with the
//! question rendered as text — icon, context, question, options or form fields, as the
//! middleware renders its fallback text (without the structured card) — and, being
//! `return_direct`, still ends the run when it is the turn's only registered call.

use std::sync::Arc;

use antler_protocol::Object;
use antler_runtime::clarification::{question_text, QuestionField};
use antler_runtime::{Tool, ToolContext, ToolError, ToolOutput, TypedSpec, TypedTool};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

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
pub use antler_runtime::clarification::FIELD_TYPES;

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
/// `ask_clarification` arguments. The values stay JSON: the question is rendered leniently
/// (options given as a JSON string, numbers, `null` context), as DeerFlow renders them; the
/// types below are only what the model is offered.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    /// The question for the user, specific and clear.
    #[schemars(with = "String")]
    question: Option<Value>,
    /// Why you ask: missing_info, ambiguous_requirement, approach_choice, risk_confirmation or suggestion.
    #[schemars(with = "ClarificationType")]
    clarification_type: Option<Value>,
    /// Optional background: why the answer is needed.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    context: Option<Value>,
    /// Optional choices for the user to pick one from (approach_choice, suggestion).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    options: Option<Value>,
    /// Optional form for collecting several values in one answer; wins over `options`. At most 16 fields, 24 options per field and 200 characters per name, label, option or placeholder — beyond that the question falls back to plain text.
    #[serde(default)]
    #[schemars(with = "Option<Vec<FormField>>")]
    fields: Option<Value>,
}

impl Args {
    fn into_object(self) -> Object {
        [
            ("question", self.question),
            ("clarification_type", self.clarification_type),
            ("context", self.context),
            ("options", self.options),
            ("fields", self.fields),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?)))
        .collect()
    }
}

// Schema-only types (see `Args`). Plain comments: a doc comment would become a description.
// `skip_serializing_if` keeps an optional key free of a `default` in the schema.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ClarificationType {
    MissingInfo,
    AmbiguousRequirement,
    ApproachChoice,
    RiskConfirmation,
    Suggestion,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
struct FormField {
    /// Unique identifier of the field (not a JavaScript prototype name such as `constructor` or `toString`).
    name: String,
    /// Text shown to the user; defaults to the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    label: Option<String>,
    /// Input kind; defaults to text. A checkbox is a yes/no value that defaults to no; mark it required only when the user must tick it to go on.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "FieldType")]
    kind: Option<FieldType>,
    /// Whether the user must fill it in; defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    required: Option<bool>,
    /// Choices; needed for select and multi_select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<String>")]
    options: Option<Vec<String>>,
    /// Hint shown in the empty input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    placeholder: Option<String>,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum FieldType {
    Text,
    Textarea,
    Number,
    Select,
    MultiSelect,
    Checkbox,
    Date,
}

pub struct AskClarificationTool {
    spec: TypedSpec<Args>,
}

impl Default for AskClarificationTool {
    fn default() -> Self {
        Self::new()
    }
}

impl AskClarificationTool {
    pub fn new() -> Self {
        AskClarificationTool {
            spec: TypedSpec::new(NAME, DESCRIPTION),
        }
    }
}

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
    let context = args
        .get("context")
        .map(text_of)
        .filter(|c| !c.is_empty() && c != "null");
    let items = match args.get("fields") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    let fields: Vec<QuestionField> = items
        .iter()
        .filter(|field| field.is_object())
        .map(|field| {
            let label = field.get("label").or_else(|| field.get("name"));
            let label = label.map(text_of).unwrap_or_default();
            QuestionField::new(field, label, options_of(field.get("options")))
        })
        .collect();
    // The options only show when there are no fields.
    let options = options_of(args.get("options"));
    question_text(icon, context.as_deref(), &question, &fields, &options)
}

#[async_trait]
impl TypedTool for AskClarificationTool {
    type Args = Args;

    const RETURN_DIRECT: bool = true;

    antler_runtime::typed_spec!(spec);

    async fn invoke(&self, args: Args, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(render_question(&args.into_object())))
    }
}
