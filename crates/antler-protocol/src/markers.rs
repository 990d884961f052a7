//! Markers that middlewares, the server and clients agree on: message names and
//! `additional_kwargs` keys that say what a message is (the summary, a hidden reminder, an
//! injected image context, …). They are wire contract with DeerFlow's frontend, so they live here
//! once instead of as string literals in every crate that writes or reads them.

use serde_json::Value;

use crate::messages::{Message, Object};

/// `additional_kwargs` flag: the UI does not render the message (the model still sees it).
pub const HIDE_FROM_UI: &str = "hide_from_ui";
/// Name of the human message that holds the summary of older history (Summarization).
pub const SUMMARY: &str = "summary";
/// `additional_kwargs` flag of the per-conversation `<system-reminder>` (DynamicContext).
pub const DYNAMIC_CONTEXT_REMINDER: &str = "dynamic_context_reminder";
/// `additional_kwargs` key: the date a dynamic-context reminder was written for.
pub const REMINDER_DATE: &str = "reminder_date";
/// Name of the warning human message LoopDetection adds to the next model request.
pub const LOOP_WARNING: &str = "loop_warning";
/// Name of the warning human message TokenBudget adds to the next model request.
pub const BUDGET_WARNING: &str = "budget_warning";
/// Name of the plan-mode reminder message (Todo).
pub const TODO_REMINDER: &str = "todo_reminder";
/// Name of the hidden, request-only nudge TerminalResponse adds after an empty answer.
pub const TERMINAL_RESPONSE_RECOVERY: &str = "terminal_response_recovery";
/// `additional_kwargs` flag of a synthetic error answer (LLMErrorHandling, TerminalResponse): the
/// run is marked `error`.
pub const ERROR_FALLBACK: &str = "deerflow_error_fallback";
/// `additional_kwargs` key of SafetyFinishReason's record on a repaired message.
pub const SAFETY_TERMINATION: &str = "safety_termination";
/// `additional_kwargs` key of the message that carries viewed images (ViewImage).
pub const VIEW_IMAGE_CONTEXT: &str = "deerflow_view_image_context";
/// `additional_kwargs` key: the user's text before Uploads prepended the file list.
pub const ORIGINAL_USER_CONTENT: &str = "original_user_content";
/// `additional_kwargs` key of a `read_file` result: `{path, hash}` of the file when it was read
/// (ReadBeforeWrite).
pub const READ_MARK: &str = "deerflow_read_mark";
/// Name of the request-only hint message ToolProgress adds to the next model request.
pub const PROGRESS_HINT: &str = "progress_hint";
/// `additional_kwargs` flag of the hidden, request-only message that carries a `/skill`'s
/// `SKILL.md` (SkillActivation).
pub const SLASH_SKILL_ACTIVATION: &str = "slash_skill_activation";
/// `additional_kwargs` key: the id of the user message a slash-skill reminder answers.
pub const SLASH_SKILL_ACTIVATION_TARGET_ID: &str = "slash_skill_activation_target_id";

/// `additional_kwargs` keys only the server may set on an incoming message (a client sending
/// them could forge a reminder or an image context).
pub const SERVER_OWNED_KWARGS: [&str; 4] = [
    ORIGINAL_USER_CONTENT,
    DYNAMIC_CONTEXT_REMINDER,
    REMINDER_DATE,
    VIEW_IMAGE_CONTEXT,
];

/// Whether `additional_kwargs[key]` is `true`.
pub fn has_flag(kwargs: &Object, key: &str) -> bool {
    kwargs.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// `additional_kwargs.hide_from_ui == true`.
pub fn is_hidden(msg: &Message) -> bool {
    has_flag(msg.additional_kwargs(), HIDE_FROM_UI)
}

/// Sets `hide_from_ui: true` in `kwargs`.
pub fn mark_hidden(kwargs: &mut Object) {
    kwargs.insert(HIDE_FROM_UI.to_owned(), Value::Bool(true));
}

/// Whether `msg` is the summary message: a human message named [`SUMMARY`].
pub fn is_summary(msg: &Message) -> bool {
    matches!(msg, Message::Human(h) if h.name.as_deref() == Some(SUMMARY))
}

/// Whether `msg` carries the dynamic-context reminder flag.
pub fn is_dynamic_context_reminder(msg: &Message) -> bool {
    has_flag(msg.additional_kwargs(), DYNAMIC_CONTEXT_REMINDER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::HumanMessage;

    #[test]
    fn hidden_summary_and_reminder_are_recognised() {
        let mut h = HumanMessage {
            content: "x".into(),
            ..Default::default()
        };
        assert!(!is_hidden(&Message::Human(h.clone())));
        mark_hidden(&mut h.additional_kwargs);
        assert!(is_hidden(&Message::Human(h.clone())));
        assert!(!is_summary(&Message::Human(h.clone())));
        h.name = Some(SUMMARY.to_owned());
        assert!(is_summary(&Message::Human(h.clone())));
        h.additional_kwargs
            .insert(DYNAMIC_CONTEXT_REMINDER.to_owned(), Value::Bool(true));
        assert!(is_dynamic_context_reminder(&Message::Human(h)));
        assert!(!is_summary(&Message::ai("x")));
    }
}
