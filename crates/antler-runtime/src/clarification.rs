//! The text of a clarification question. The `ask_clarification` tool and ClarificationMiddleware
//! (which intercepts that tool) both answer with it, so they share one renderer.

use serde_json::Value;

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

/// One form field as the question lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuestionField {
    pub label: String,
    pub required: bool,
    /// Option labels (none for free-text fields).
    pub options: Vec<String>,
    /// `type: multi_select`: several options may be picked.
    pub multi_select: bool,
}

impl QuestionField {
    /// A field of the form field object `field`: `required` and `type` read from it, the label
    /// and option labels as the caller reads them (the tool and the middleware differ there).
    pub fn new(field: &Value, label: String, options: Vec<String>) -> QuestionField {
        QuestionField {
            label,
            required: field.get("required").and_then(Value::as_bool) == Some(true),
            options,
            multi_select: field.get("type").and_then(Value::as_str) == Some("multi_select"),
        }
    }
}

/// `{icon} {question}` (after `{icon} {context}`, when given), then the form's numbered fields
/// or, without fields, the numbered `options`.
pub fn question_text(
    icon: &str,
    context: Option<&str>,
    question: &str,
    fields: &[QuestionField],
    options: &[String],
) -> String {
    let mut lines: Vec<String> = Vec::new();
    match context {
        Some(context) => {
            lines.push(format!("{icon} {context}"));
            lines.push(format!("\n{question}"));
        }
        None => lines.push(format!("{icon} {question}")),
    }
    if !fields.is_empty() {
        lines.push(String::new());
        for (i, field) in fields.iter().enumerate() {
            let mut line = format!("  {}. {}", i + 1, field.label);
            if field.required {
                line.push_str(" (required)");
            }
            if !field.options.is_empty() {
                line.push_str(" — options: ");
                line.push_str(&field.options.join(" / "));
                if field.multi_select {
                    line.push_str(" (multiple allowed)");
                }
            }
            lines.push(line);
        }
        lines.push(String::new());
        lines.push("Please reply with a value for each field.".to_owned());
    } else if !options.is_empty() {
        lines.push(String::new());
        for (i, option) in options.iter().enumerate() {
            lines.push(format!("  {}. {option}", i + 1));
        }
    }
    lines.join("\n")
}
