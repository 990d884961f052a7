//! Neutralizing untrusted text before it enters a model's context (spec 50 §7.4, spec 30
//! InputSanitization): the one primitive shared by the input-sanitization middleware (the user's
//! message), the tool-result-sanitization middleware (web pages, search snippets, MCP results),
//! the uploads block (file names, outlines) and anything else that places outside text into
//! framework blocks.
//!
//! Two structural defences and nothing else:
//!
//! - framework and injection tags (`<system-reminder>`, `</memory>`, `<system attr=…>`, a bare
//!   `<think`, …; [`BLOCKED_TAGS`], case-insensitive) keep their text but lose their angle
//!   brackets (`&lt;system-reminder&gt;`), so forged context reads as literal text;
//! - the plain-text user-input boundary markers become inert look-alikes, so untrusted text can
//!   neither forge nor close the user-input frame.
//!
//! Lives here, beside the message types, because every layer that builds model input (the
//! middlewares, the web tools, the MCP adapter) already depends on this crate.

use std::sync::OnceLock;

use regex::Regex;

/// The marker opening the user's text in the request (the system prompt explains it).
pub const USER_INPUT_BEGIN: &str = "--- BEGIN USER INPUT ---";
/// The marker closing the user's text.
pub const USER_INPUT_END: &str = "--- END USER INPUT ---";
/// What a [`USER_INPUT_BEGIN`] inside untrusted text becomes.
pub const NEUTRALIZED_BEGIN: &str = "[BEGIN USER INPUT]";
/// What a [`USER_INPUT_END`] inside untrusted text becomes.
pub const NEUTRALIZED_END: &str = "[END USER INPUT]";

/// Tag names escaped in untrusted text: every block tag the framework itself emits into model
/// input (a forged one would read as trusted framework context), plus common injection tags.
/// DeerFlow's 40 and antler's `file_editing`; a test in antler-agent scans the code for block
/// tags and fails on one missing here.
pub const BLOCKED_TAGS: &[&str] = &[
    "system-reminder",
    "system_reminder",
    "memory",
    "current_date",
    "think",
    "analysis",
    "role",
    "soul",
    "self_update",
    "thinking_style",
    "clarification_system",
    "critical_reminders",
    "response_style",
    "citations",
    "uploaded_files",
    "current_uploads",
    "subagent_system",
    "skill_system",
    "skill_index",
    "available_skills",
    "disabled_skills",
    "memory_tool_system",
    "todo_list_system",
    "durable_context_data",
    "slash_skill_activation",
    "mcp_routing_hints",
    "available-deferred-tools",
    "goal_continuation",
    "background_task_event",
    "file_editing_workflow",
    "guidelines",
    "output_format",
    "working_directory",
    "tool_restrictions",
    // antler's name for DeerFlow's `file_editing_workflow` (subagent prompt).
    "file_editing",
    "system",
    "instruction",
    "important",
    "override",
    "ignore",
    "prompt",
];

/// `<`, optional spaces, optional `/`, optional spaces, a blocked name ending at a word
/// boundary, then everything up to and including the next `>` (if any). So `<think`,
/// `< think >`, `</ THINK>` and `<system attr='x'>` match; `<div>` and `<systematic>` do not.
fn tag_pattern() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        let mut names: Vec<&str> = BLOCKED_TAGS.to_vec();
        // Longest first, so `system-reminder` is preferred over its prefix `system`.
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        let alternation = names
            .iter()
            .map(|n| regex::escape(n))
            .collect::<Vec<_>>()
            .join("|");
        Regex::new(&format!(r"(?i)<\s*/?\s*(?:{alternation})\b[^>]*>?")).ok()
    })
    .as_ref()
}

fn escape_tags(text: &str) -> String {
    match tag_pattern() {
        Some(re) => re
            .replace_all(text, |c: &regex::Captures<'_>| {
                c[0].replace('<', "&lt;").replace('>', "&gt;")
            })
            .into_owned(),
        // Unreachable with a constant pattern; escaping every bracket still fails safe.
        None => text.replace('<', "&lt;").replace('>', "&gt;"),
    }
}

fn neutralize_markers(text: &str) -> String {
    if !text.contains("--- ") {
        return text.to_owned();
    }
    text.replace(USER_INPUT_BEGIN, NEUTRALIZED_BEGIN)
        .replace(USER_INPUT_END, NEUTRALIZED_END)
}

/// Escape blocked tags and disarm boundary markers in untrusted text. Blank text is returned
/// unchanged. Idempotent: `neutralize(neutralize(t)) == neutralize(t)`.
pub fn neutralize(text: &str) -> String {
    if text.trim().is_empty() {
        return text.to_owned();
    }
    neutralize_markers(&escape_tags(text))
}

/// [`neutralize`], then wrap the text between the user-input markers (newline-separated).
/// Blank text is returned unchanged. Text that is already exactly framed keeps its frame and only
/// has markers inside it disarmed, so framing twice changes nothing.
pub fn frame(text: &str) -> String {
    if text.trim().is_empty() {
        return text.to_owned();
    }
    let escaped = escape_tags(text);
    if let Some(inner) = escaped
        .strip_prefix(USER_INPUT_BEGIN)
        .and_then(|rest| rest.strip_suffix(USER_INPUT_END))
    {
        // A forged outer frame still gets its inner markers disarmed (no break-out).
        return format!(
            "{USER_INPUT_BEGIN}{}{USER_INPUT_END}",
            neutralize_markers(inner)
        );
    }
    format!(
        "{USER_INPUT_BEGIN}\n{}\n{USER_INPUT_END}",
        neutralize_markers(&escaped)
    )
}

#[cfg(test)]
#[path = "untrusted_tests.rs"]
mod tests;
