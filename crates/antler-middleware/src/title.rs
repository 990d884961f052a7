//! Title (chain L8, after_model): name the thread after its first complete exchange (spec 40
//! part 2 §5.5, spec 60 §15).
//!
//! Eligible when enabled, the thread has no title yet, and the messages hold exactly one user
//! message (dynamic-context reminders do not count) and at least one AI message. With a title
//! model configured the title comes from one non-streaming call that carries no tools (prompt:
//! `prompt_template` with `{max_words}`, `{user_msg}`, `{assistant_msg}`, think blocks removed),
//! reported to observers as `RunEvent::ModelResponse{caller: "middleware:title"}`; the answer is
//! cleaned (think blocks, quotes) and cut to `max_chars`. Without a model, or when the call
//! fails or answers nothing, the title is the first user message, truncated. Once set it is never
//! regenerated: the `title` check short-circuits every later step in O(1).

use std::sync::Arc;
use std::sync::LazyLock;

use antler_models::ChatModel;
use antler_protocol::markers;
use antler_protocol::{Content, Message, StateUpdate, ThreadState};
use antler_runtime::{HookOutput, HookSet, Middleware, RunContext};
use async_trait::async_trait;
use regex::Regex;
use serde_json::Value;

use crate::hook::HookResult;
use crate::side_model::invoke_observed;

const NAME: &str = "TitleMiddleware";
/// How the title call is identified to observers (the run journal's caller buckets).
pub const CALLER: &str = "middleware:title";
/// Characters of the user and assistant texts put into the prompt.
const PROMPT_TEXT_CHARS: usize = 500;
/// Longest fallback title body (before `max_chars`).
const FALLBACK_CHARS: usize = 50;
/// Title when the user message has no text.
pub const EMPTY_TITLE: &str = "New Conversation";

/// `title:` (spec 60 §15). `model_name` is resolved by the caller into the model it passes to
/// [`TitleMiddleware::new`].
pub use antler_config::TitleConfig;
/// The default title prompt (antler's wording, DeerFlow's placeholders).
pub use antler_config::DEFAULT_TITLE_PROMPT as DEFAULT_PROMPT_TEMPLATE;

// The pattern is a literal; it always compiles.
#[allow(clippy::expect_used)]
static THINK_BLOCK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)<think>[\s\S]*?</think>").expect("valid regex"));

/// Settings outside DeerFlow's ranges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TitleConfigError {
    #[error("title.max_words must be between 1 and 20 (got {0})")]
    MaxWords(usize),
    #[error("title.max_chars must be between 10 and 200 (got {0})")]
    MaxChars(usize),
}

/// DeerFlow's ranges for `title.max_words` and `title.max_chars`.
pub fn validate(config: &TitleConfig) -> Result<(), TitleConfigError> {
    if !(1..=20).contains(&config.max_words) {
        return Err(TitleConfigError::MaxWords(config.max_words));
    }
    if !(10..=200).contains(&config.max_chars) {
        return Err(TitleConfigError::MaxChars(config.max_chars));
    }
    Ok(())
}

/// A prompt template that Python's `str.format` would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown placeholder '{{{0}}}' in title.prompt_template")]
    UnknownPlaceholder(String),
    #[error("unbalanced brace in title.prompt_template")]
    Unbalanced,
}

/// Fill `{max_words}`, `{user_msg}` and `{assistant_msg}` (`str.format` semantics: `{{`/`}}`
/// escape braces; any other placeholder is an error).
pub fn format_prompt(
    template: &str,
    max_words: usize,
    user_msg: &str,
    assistant_msg: &str,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len() + user_msg.len() + assistant_msg.len());
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '}' => return Err(TemplateError::Unbalanced),
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => return Err(TemplateError::Unbalanced),
                        Some(ch) => name.push(ch),
                    }
                }
                match name.as_str() {
                    "max_words" => out.push_str(&max_words.to_string()),
                    "user_msg" => out.push_str(user_msg),
                    "assistant_msg" => out.push_str(assistant_msg),
                    _ => return Err(TemplateError::UnknownPlaceholder(name)),
                }
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Remove `<think>…</think>` blocks (any case) and surrounding whitespace.
pub fn strip_think_tags(text: &str) -> String {
    THINK_BLOCK.replace_all(text, "").trim().to_owned()
}

/// Text of message content: strings as they are; blocks by their `text`, or recursively their
/// `content`; non-empty parts joined with newlines.
pub fn content_text(content: &Content) -> String {
    fn of_value(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(items) => join(items.iter().map(of_value)),
            Value::Object(o) => match (o.get("text"), o.get("content")) {
                (Some(Value::String(t)), _) => t.clone(),
                (_, Some(nested)) if !nested.is_null() => of_value(nested),
                _ => String::new(),
            },
            _ => String::new(),
        }
    }
    fn join(parts: impl Iterator<Item = String>) -> String {
        parts
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }
    match content {
        Content::Text(s) => s.clone(),
        Content::Blocks(blocks) => join(blocks.iter().map(of_value)),
    }
}

fn take_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn is_reminder(m: &Message) -> bool {
    matches!(m, Message::Human(_) | Message::System(_))
        && m.additional_kwargs()
            .get(markers::DYNAMIC_CONTEXT_REMINDER)
            .is_some_and(|v| match v {
                Value::Bool(b) => *b,
                Value::Null => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
            })
}

fn is_title_user_message(m: &Message) -> bool {
    matches!(m, Message::Human(_)) && !is_reminder(m)
}

/// What eligibility needs from the messages, gathered in one pass that stops at the second user
/// message.
struct Exchange<'a> {
    user: Option<&'a Message>,
    users: usize,
    first_ai: Option<&'a Message>,
    len: usize,
}

fn scan(state: &ThreadState) -> Exchange<'_> {
    let mut ex = Exchange {
        user: None,
        users: 0,
        first_ai: None,
        len: state.messages.len(),
    };
    for m in state.messages.iter() {
        if is_title_user_message(m) {
            ex.users += 1;
            if ex.users > 1 {
                break;
            }
            ex.user = Some(m);
        } else if matches!(m, Message::Ai(_)) && ex.first_ai.is_none() {
            ex.first_ai = Some(m);
        }
    }
    ex
}

/// Names the thread once, from a title model or the first user message.
pub struct TitleMiddleware {
    settings: TitleConfig,
    model: Option<Arc<dyn ChatModel>>,
}

impl TitleMiddleware {
    /// `model`: the `title.model_name` model (built with thinking off), or `None` for the local
    /// fallback title only.
    pub fn new(settings: TitleConfig, model: Option<Arc<dyn ChatModel>>) -> Self {
        TitleMiddleware { settings, model }
    }

    pub fn settings(&self) -> &TitleConfig {
        &self.settings
    }

    fn eligible<'a>(&self, state: &'a ThreadState, allow_partial: bool) -> Option<Exchange<'a>> {
        if !self.settings.enabled || state.title.as_deref().is_some_and(|t| !t.is_empty()) {
            return None;
        }
        let min = if allow_partial { 1 } else { 2 };
        if state.messages.len() < min {
            return None;
        }
        let ex = scan(state);
        (ex.len >= min && ex.users == 1 && (ex.first_ai.is_some() || allow_partial)).then_some(ex)
    }

    /// Whether a title would be generated now; `allow_partial_exchange` accepts a lone first
    /// user message (an interrupted first turn).
    pub fn should_generate(&self, state: &ThreadState, allow_partial_exchange: bool) -> bool {
        self.eligible(state, allow_partial_exchange).is_some()
    }

    /// The local title: the user text, cut to `min(max_chars, 50)` with `...` when longer, never
    /// over `max_chars`; [`EMPTY_TITLE`] for no text.
    pub fn fallback_title(&self, user_msg: &str) -> String {
        let limit = self.settings.max_chars.min(FALLBACK_CHARS);
        if user_msg.chars().count() > limit {
            let body = limit.min(self.settings.max_chars.saturating_sub(3));
            format!("{}...", take_chars(user_msg, body).trim_end())
        } else if user_msg.is_empty() {
            EMPTY_TITLE.to_owned()
        } else {
            user_msg.to_owned()
        }
    }

    /// Clean a title model's answer: content normalized, think blocks and surrounding
    /// whitespace/quotes removed, cut to `max_chars`. May be empty.
    pub fn parse_title(&self, content: &Content) -> String {
        let text = strip_think_tags(&content_text(content));
        let title = text.trim().trim_matches('"').trim_matches('\'');
        take_chars(title, self.settings.max_chars).to_owned()
    }

    /// The prompt for the title model, or why the template cannot be used.
    pub fn build_prompt(&self, state: &ThreadState) -> Result<String, TemplateError> {
        let ex = scan(state);
        let user = ex
            .user
            .map(|m| content_text(m.content()))
            .unwrap_or_default();
        let assistant = ex
            .first_ai
            .map(|m| strip_think_tags(&content_text(m.content())))
            .unwrap_or_default();
        format_prompt(
            &self.settings.prompt_template,
            self.settings.max_words,
            take_chars(&user, PROMPT_TEXT_CHARS),
            take_chars(&assistant, PROMPT_TEXT_CHARS),
        )
    }

    /// The fallback title for an interrupted first turn (a lone user message suffices), or
    /// `None` when the thread already has a title or is past its first turn. For the run worker.
    pub fn interrupted_title(&self, state: &ThreadState) -> Option<String> {
        let ex = self.eligible(state, true)?;
        let user = ex
            .user
            .map(|m| content_text(m.content()))
            .unwrap_or_default();
        Some(self.fallback_title(&user))
    }

    /// Ask the title model; `None` on any failure or an empty answer.
    async fn model_title(
        &self,
        model: &Arc<dyn ChatModel>,
        state: &ThreadState,
        run: &RunContext,
    ) -> Option<String> {
        let prompt = match self.build_prompt(state) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "title prompt template unusable; using the fallback title");
                return None;
            }
        };
        let messages = [Arc::new(Message::human(prompt))];
        let message_id = format!("title--{}", uuid::Uuid::new_v4());
        match invoke_observed(&**model, run, CALLER, &messages, &message_id).await {
            Ok(response) => {
                let title = self.parse_title(&response.content);
                (!title.is_empty()).then_some(title)
            }
            Err(error) => {
                tracing::debug!(error = %error, "title model failed; using the fallback title");
                None
            }
        }
    }
}

#[async_trait]
impl Middleware for TitleMiddleware {
    middleware_identity!(NAME, HookSet::AFTER_MODEL, deferrable: HookSet::AFTER_MODEL);

    async fn after_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        let Some(ex) = self.eligible(state, false) else {
            return Ok(HookOutput::none());
        };
        let user = ex
            .user
            .map(|m| content_text(m.content()))
            .unwrap_or_default();
        let title = match &self.model {
            Some(model) => self.model_title(model, state, run).await,
            None => None,
        }
        .unwrap_or_else(|| self.fallback_title(&user));
        Ok(HookOutput::update(StateUpdate {
            title: Some(Some(title)),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_formatting_follows_str_format() {
        assert_eq!(
            format_prompt("{{x}} {max_words} {user_msg}/{assistant_msg}", 6, "u", "a"),
            Ok("{x} 6 u/a".to_owned())
        );
        assert_eq!(
            format_prompt("{usr_msg}", 6, "u", "a"),
            Err(TemplateError::UnknownPlaceholder("usr_msg".into()))
        );
        assert_eq!(
            format_prompt("{}", 6, "u", "a"),
            Err(TemplateError::UnknownPlaceholder(String::new()))
        );
        assert_eq!(
            format_prompt("oops }", 6, "u", "a"),
            Err(TemplateError::Unbalanced)
        );
        assert_eq!(
            format_prompt("{user_msg", 6, "u", "a"),
            Err(TemplateError::Unbalanced)
        );
    }

    #[test]
    fn nested_block_content_is_normalized() {
        let c = Content::Blocks(vec![
            serde_json::json!({"type": "text", "text": "a"}),
            serde_json::json!("b"),
            serde_json::json!({"content": [{"text": "c"}, {"type": "image_url"}]}),
            serde_json::json!({"type": "image_url"}),
        ]);
        assert_eq!(content_text(&c), "a\nb\nc");
    }
}
