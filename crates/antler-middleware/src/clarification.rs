//! Clarification (chain L22, always last, wrap_tool): an `ask_clarification` call becomes a
//! question for the human and ends the run (spec 30 §ClarificationMiddleware, spec 70 §5.6).
//!
//! Innermost tool wrapper, so every outer wrapper (guardrails, error handling) still sees the
//! call, and the tool itself never runs. The question is answered with a tool message whose
//! text is a readable fallback and whose `artifact.human_input` is the structured card the web
//! UI renders (free text, choices, or a v2 form). It comes back as a
//! `Command{update: messages, goto: End}`: the rest of the tool batch is still recorded, then
//! the run ends `success` with the question last and no further model call (DESIGN §7). The
//! answer is simply the next human message on the thread.
//!
//! The message id is deterministic (`clarification:<tool_call_id>`, or a hash of the text), so
//! a retried identical call replaces the message instead of adding a second one. With the run
//! option `disable_clarification` (no human present) the call is answered with a plain result
//! telling the model to proceed on its own judgment, and the loop goes on.

use std::sync::LazyLock;

use antler_protocol::{Content, Object, StateUpdate, ToolMessage};
use antler_runtime::clarification::{question_text, QuestionField};
use antler_runtime::{
    Command, Goto, HookSet, Middleware, RunContext, RunKey, ToolCallRequest, ToolNext, ToolOutcome,
};
use async_trait::async_trait;
use regex::Regex;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::hook::ToolResult;
use crate::py::truthy;

/// The middleware's name in chain listings.
pub const NAME: &str = "ClarificationMiddleware";

/// The tool this middleware intercepts.
pub const TOOL_NAME: &str = "ask_clarification";

/// Run option (context key) that turns clarifications into "proceed" answers.
pub const DISABLE_KEY: &str = "disable_clarification";
/// The same flag as a run-scoped value; when set it wins over the run option.
pub const DISABLED: RunKey<bool> = RunKey::new(DISABLE_KEY);

/// Caps that keep a model-made form renderable; exceeding any rejects the whole form.
pub const MAX_FORM_FIELDS: usize = 16;
pub const MAX_FIELD_OPTIONS: usize = 24;
pub const MAX_FIELD_TEXT_CHARS: usize = 200;
/// Budget of the serialized normalized fields, in UTF-8 bytes.
pub const MAX_FORM_SERIALIZED_BYTES: usize = 16_384;

/// Form field types a card can render; any other type degrades to `text`.
pub use antler_runtime::clarification::FIELD_TYPES;

/// Field names that would shadow `Object.prototype` members in the UI's form-value store.
const RESERVED_FIELD_NAMES: &[&str] = &[
    "__proto__",
    "constructor",
    "prototype",
    "toString",
    "toLocaleString",
    "valueOf",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

const PROCEED_TEXT: &str = "Clarification is disabled for this run: no human is present to answer right now. Do not ask for confirmation. Proceed with your best judgment, carry out the requested work, and state in your final answer any assumptions you made.";

static XML_TAG: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"</?[A-Za-z_][\w:.-]*(?:\s[^<>]*?)?\s*/?>").ok());

/// Intercepts `ask_clarification` and ends the run with the question.
#[derive(Debug, Default)]
pub struct ClarificationMiddleware;

impl ClarificationMiddleware {
    pub fn new() -> Self {
        ClarificationMiddleware
    }
}

// ------------------------------------------------------------------------- python-isms

/// Python's `str()` of a JSON value (the model's arguments are rendered as DeerFlow renders
/// them: `None`, `True`, `['a', 1]`).
fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(o) => {
            let inner: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("'{k}': {}", py_repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// Length of `v` as Python's `json.dumps(…, ensure_ascii=False)` writes it, for the form's
/// byte budget: serde's compact form plus the space Python's `", "` and `": "` separators add.
fn py_json_len(v: &Value) -> usize {
    fn separator_spaces(v: &Value) -> usize {
        match v {
            Value::Array(a) => {
                a.len().saturating_sub(1) + a.iter().map(separator_spaces).sum::<usize>()
            }
            Value::Object(o) => {
                o.len().saturating_sub(1)
                    + o.len()
                    + o.values().map(separator_spaces).sum::<usize>()
            }
            _ => 0,
        }
    }
    match serde_json::to_vec(v) {
        Ok(compact) => compact.len() + separator_spaces(v),
        Err(_) => usize::MAX,
    }
}

// ----------------------------------------------------------------------- normalization

fn strip_tags(s: &str) -> String {
    match &*XML_TAG {
        Some(re) => re.replace_all(s, "").into_owned(),
        None => s.to_owned(),
    }
}

fn flatten_scalars(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(o) => o.values().for_each(|x| flatten_scalars(x, out)),
        Value::Array(a) => a.iter().for_each(|x| flatten_scalars(x, out)),
        Value::String(_) | Value::Number(_) | Value::Bool(_) => out.push(v.clone()),
        Value::Null => {}
    }
}

/// Options as display strings: a JSON string is decoded (else it is one option), null is none,
/// an object (XML-to-dict shape) yields its scalar leaves in order, a scalar is one option;
/// each is stringified, stripped of XML-like tags and trimmed; blanks and repeats are dropped.
pub fn normalize_options(raw: Option<&Value>) -> Vec<String> {
    let decoded;
    let mut value = raw.unwrap_or(&Value::Null);
    if let Value::String(s) = value {
        decoded = serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.clone()));
        value = &decoded;
    }
    let items: Vec<Value> = match value {
        Value::Null => return Vec::new(),
        Value::Object(_) => {
            let mut out = Vec::new();
            flatten_scalars(value, &mut out);
            out
        }
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    let mut out: Vec<String> = Vec::new();
    for item in &items {
        let text = strip_tags(&py_str(item)).trim().to_owned();
        if !text.is_empty() && !out.contains(&text) {
            out.push(text);
        }
    }
    out
}

/// Options as card entries: ids `<prefix>option-1`, `<prefix>option-2`, … in order.
fn option_entries(options: &[String], prefix: &str) -> Value {
    options
        .iter()
        .enumerate()
        .map(|(i, o)| json!({"id": format!("{prefix}option-{}", i + 1), "label": o, "value": o}))
        .collect()
}

fn coerce_bool(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
        _ => false,
    }
}

fn too_long(s: &str) -> bool {
    s.chars().count() > MAX_FIELD_TEXT_CHARS
}

/// Form fields in the v2 card schema, or empty when there is no usable form. Validation is
/// atomic: a structural problem anywhere rejects the whole form (so a card never renders
/// "complete" while missing a field); unknown types and option-less selects degrade to `text`.
pub fn normalize_fields(raw: Option<&Value>) -> Vec<Value> {
    let decoded;
    let mut value = raw.unwrap_or(&Value::Null);
    if let Value::String(s) = value {
        match serde_json::from_str::<Value>(s) {
            Ok(v) => decoded = v,
            Err(_) => return Vec::new(),
        }
        value = &decoded;
    }
    let Value::Array(entries) = value else {
        return Vec::new();
    };
    if entries.len() > MAX_FORM_FIELDS {
        return Vec::new();
    }
    let mut fields = Vec::with_capacity(entries.len());
    let mut seen: Vec<String> = Vec::new();
    for entry in entries {
        let Value::Object(entry) = entry else {
            return Vec::new();
        };
        let Some(name) = entry
            .get("name")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
        else {
            return Vec::new();
        };
        if RESERVED_FIELD_NAMES.contains(&name) || seen.iter().any(|s| s == name) || too_long(name)
        {
            return Vec::new();
        }
        seen.push(name.to_owned());

        let label = entry
            .get("label")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .unwrap_or(name);
        if too_long(label) {
            return Vec::new();
        }

        let mut kind = entry
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| FIELD_TYPES.contains(t))
            .unwrap_or("text");
        let choice = matches!(kind, "select" | "multi_select");
        let options = if choice {
            normalize_options(entry.get("options"))
        } else {
            Vec::new()
        };
        if options.len() > MAX_FIELD_OPTIONS || options.iter().any(|o| too_long(o)) {
            return Vec::new();
        }
        if choice && options.is_empty() {
            kind = "text";
        }

        let mut field = Map::new();
        field.insert("name".into(), Value::from(name));
        field.insert("label".into(), Value::from(label));
        field.insert("type".into(), Value::from(kind));
        field.insert(
            "required".into(),
            Value::Bool(coerce_bool(entry.get("required"))),
        );
        if matches!(kind, "select" | "multi_select") {
            field.insert(
                "options".into(),
                option_entries(&options, &format!("{name}-")),
            );
        }
        if let Some(p) = entry
            .get("placeholder")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            if too_long(p) {
                return Vec::new();
            }
            field.insert("placeholder".into(), Value::from(p));
        }
        fields.push(Value::Object(field));
    }
    if py_json_len(&Value::Array(fields.clone())) > MAX_FORM_SERIALIZED_BYTES {
        return Vec::new();
    }
    fields
}

// --------------------------------------------------------------------------- rendering

fn clarification_type(args: &Object) -> String {
    args.get("clarification_type")
        .map(py_str)
        .unwrap_or_else(|| "missing_info".to_owned())
}

fn icon(kind: &str) -> &'static str {
    match kind {
        "ambiguous_requirement" => "🤔",
        "approach_choice" => "🔀",
        "risk_confirmation" => "⚠️",
        "suggestion" => "💡",
        _ => "❓",
    }
}

/// The tool message's text: icon and question (after the context, when given), then the form's
/// fields or the numbered options.
pub fn format_question(args: &Object, fields: &[Value]) -> String {
    let question = args.get("question").map(py_str).unwrap_or_default();
    let context = args.get("context").filter(|c| truthy(c)).map(py_str);
    let fields: Vec<QuestionField> = fields
        .iter()
        .map(|field| {
            let label = field.get("label").and_then(Value::as_str).unwrap_or("");
            let options = match field.get("options") {
                Some(Value::Array(opts)) => opts
                    .iter()
                    .filter_map(|o| o.get("label").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            };
            QuestionField::new(field, label.to_owned(), options)
        })
        .collect();
    let icon = icon(&clarification_type(args));
    // The options only show when there are no fields.
    let options = normalize_options(args.get("options"));
    question_text(icon, context.as_deref(), &question, &fields, &options)
}

/// `clarification:<tool_call_id>`, or `clarification:` + the first 16 hex digits of the text's
/// SHA-256 when the call has no id — so a retried identical call replaces the message.
pub fn stable_message_id(tool_call_id: &str, text: &str) -> String {
    if !tool_call_id.is_empty() {
        return format!("clarification:{tool_call_id}");
    }
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("clarification:{hex}")
}

/// `artifact.human_input` (spec 70 §5.6): a v2 `form` when the fields are usable, else v1
/// `choice_with_other` with options, else v1 `free_text`.
pub fn human_input_payload(
    args: &Object,
    tool_call_id: &str,
    request_id: &str,
    fields: &[Value],
) -> Value {
    let options = normalize_options(args.get("options"));
    let (version, mode) = if !fields.is_empty() {
        (2, "form")
    } else if !options.is_empty() {
        (1, "choice_with_other")
    } else {
        (1, "free_text")
    };
    let question = match args.get("question") {
        Some(q) if truthy(q) => py_str(q),
        _ => String::new(),
    };
    let mut p = Map::new();
    p.insert("version".into(), Value::from(version));
    p.insert("kind".into(), Value::from("human_input_request"));
    p.insert("source".into(), Value::from(TOOL_NAME));
    p.insert("request_id".into(), Value::from(request_id));
    p.insert(
        "clarification_type".into(),
        Value::from(clarification_type(args)),
    );
    p.insert("question".into(), Value::from(question));
    p.insert("input_mode".into(), Value::from(mode));
    if !tool_call_id.is_empty() {
        p.insert("tool_call_id".into(), Value::from(tool_call_id));
    }
    if let Some(context) = args.get("context") {
        let context = match context {
            Value::Null => Value::Null,
            other => Value::String(py_str(other)),
        };
        p.insert("context".into(), context);
    }
    if mode == "form" {
        p.insert("fields".into(), Value::Array(fields.to_vec()));
    } else if !options.is_empty() {
        p.insert("options".into(), option_entries(&options, ""));
    }
    Value::Object(p)
}

/// The tool message asking the question (id, text and card).
pub fn clarification_message(tool_call_id: &str, args: &Object) -> ToolMessage {
    let fields = normalize_fields(args.get("fields"));
    let text = format_question(args, &fields);
    let request_id = stable_message_id(tool_call_id, &text);
    let payload = human_input_payload(args, tool_call_id, &request_id, &fields);
    ToolMessage {
        id: Some(request_id),
        content: Content::Text(text),
        tool_call_id: tool_call_id.to_owned(),
        name: Some(TOOL_NAME.to_owned()),
        artifact: json!({"human_input": payload}),
        ..Default::default()
    }
}

/// The plain result a clarification gets when no human is present.
pub fn proceed_message(tool_call_id: &str) -> ToolMessage {
    ToolMessage {
        id: Some(stable_message_id(
            tool_call_id,
            "proceed-without-clarification",
        )),
        content: Content::Text(PROCEED_TEXT.to_owned()),
        tool_call_id: tool_call_id.to_owned(),
        name: Some(TOOL_NAME.to_owned()),
        ..Default::default()
    }
}

/// Whether the run asked for clarifications to be answered with "proceed" (a run-scoped value
/// or the run option `disable_clarification`).
pub fn clarification_disabled(run: &RunContext) -> bool {
    match run.get(&DISABLED) {
        Some(disabled) => disabled,
        None => run.options.extra.get(DISABLE_KEY).is_some_and(truthy),
    }
}

#[async_trait]
impl Middleware for ClarificationMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        if req.call.name != TOOL_NAME {
            return next.run(req).await;
        }
        let call_id = req.call.id_str();
        if clarification_disabled(&req.run) {
            tracing::info!("ask_clarification answered with 'proceed' (disable_clarification)");
            return Ok(ToolOutcome::Message(proceed_message(call_id)));
        }
        tracing::info!(call = %call_id, "clarification requested; the run ends after this tool batch");
        let msg = clarification_message(call_id, &req.call.args);
        Ok(ToolOutcome::Command(Command {
            update: StateUpdate::message(msg),
            goto: Some(Goto::End),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_json_len_counts_python_separators() {
        // Lengths of `json.dumps(v, ensure_ascii=False).encode()` in CPython.
        let cases = [
            (json!([]), 2),
            (json!({}), 2),
            (json!([1]), 3),
            (json!({"a": [1, 2], "b": {"c": "x, y: z"}}), 36),
            (
                json!([{"name": "é", "options": [{"id": "a", "label": "b"}]}, null, true]),
                68,
            ),
            (json!({"k": [[], {}]}), 15),
        ];
        for (value, python_len) in cases {
            assert_eq!(py_json_len(&value), python_len, "{value}");
        }
    }
}
