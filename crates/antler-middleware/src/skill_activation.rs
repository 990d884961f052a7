//! SkillActivation (chain L2 / U1, wrap_model): when the latest real user message starts with
//! `/skill-name`, the skill's whole `SKILL.md` goes into that model call as a hidden,
//! request-only human message just before the user's message — once per user command per run
//! (spec 30 §SkillActivation). The activated skill is published under
//! [`SLASH_SOURCE`](crate::skill_registry::SLASH_SOURCE) with the chain's owner token, so
//! SkillToolPolicy (L3 / U2) enforces its `allowed-tools`.
//!
//! A slash command that cannot be honoured (skill not installed, disabled, not available for
//! this agent, or its file not safely readable) answers the turn with a short AI message
//! instead of calling the model.
//!
//! Not implemented: DeerFlow's request-scoped secret binding (antler has no caller secrets).

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::markers::{
    self, ORIGINAL_USER_CONTENT, SLASH_SKILL_ACTIVATION, SLASH_SKILL_ACTIVATION_TARGET_ID,
};
use antler_protocol::{AiMessage, Content, HumanMessage, Message};
use antler_runtime::{HookSet, Middleware, ModelNext, ModelRequest, ModelResponse, RunEvent};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::hook::ModelResult;
use crate::read_before_write::content_hash;
use crate::skill_registry::{
    parse_slash, SkillRecord, SkillRegistry, SlashSource, ACTIVATION_RUN, SLASH_SOURCE,
};

/// Suffix of the reminder's id (`<user message id>__slash_activation`).
const ID_SUFFIX: &str = "__slash_activation";

/// HTML/XML escaping of interpolated text and attributes.
pub fn escape(s: &str) -> String {
    crate::py::html_escape(s, true)
}

/// Whether `msg` is an activation reminder.
pub fn is_activation_reminder(msg: &Message) -> bool {
    markers::has_flag(msg.additional_kwargs(), SLASH_SKILL_ACTIVATION)
}

/// Why a slash command was refused (the text the user reads).
fn refusal(name: &str, why: Refusal) -> String {
    match why {
        Refusal::NotInstalled => format!("Skill `/{name}` is not installed."),
        Refusal::Disabled => format!(
            "Skill `/{name}` is installed but disabled. Enable it before using slash activation."
        ),
        Refusal::NotAvailable => format!("Skill `/{name}` is not available for this agent."),
        Refusal::Unresolvable => format!("Skill `/{name}` could not be resolved."),
        Refusal::Unsafe => format!(
            "Skill `/{name}` could not be loaded safely. Please check the skill installation."
        ),
    }
}

#[derive(Clone, Copy, Debug)]
enum Refusal {
    NotInstalled,
    Disabled,
    NotAvailable,
    Unresolvable,
    Unsafe,
}

/// Read `SKILL.md` only if it really is a `SKILL.md` beneath the skills root, as UTF-8.
fn read_skill_file(skill: &SkillRecord) -> Result<String, String> {
    if skill.host_file.file_name().and_then(|n| n.to_str()) != Some("SKILL.md") {
        return Err("not a SKILL.md".into());
    }
    let root = std::fs::canonicalize(&skill.root).map_err(|e| e.to_string())?;
    let file = std::fs::canonicalize(&skill.host_file).map_err(|e| e.to_string())?;
    if !file.starts_with(&root) {
        return Err(format!("{} is outside the skills root", file.display()));
    }
    let bytes = std::fs::read(&file).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())
}

struct Activation {
    skill: SkillRecord,
    content: String,
    remaining: String,
}

fn reminder_text(a: &Activation) -> String {
    let request = if a.remaining.is_empty() {
        "The user gave no task with the command: ask them what they want to do with this skill."
            .to_owned()
    } else {
        format!("<user_request>\n{}\n</user_request>", escape(&a.remaining))
    };
    format!(
        "<slash_skill_activation>\nThe user explicitly activated the skill `/{name}` for this turn.\n{request}\n\
Follow this skill first. Its instructions are below; load other files from its folder only when they are needed.\n\
<skill name=\"{name}\" category=\"{category}\" path=\"{path}\" sha256=\"{hash}\" editable=\"{editable}\">\n\
<skill_content encoding=\"xml-escaped\">\n{body}\n</skill_content>\n</skill>\n</slash_skill_activation>",
        name = escape(&a.skill.name),
        category = escape(&a.skill.category),
        path = escape(&a.skill.container_file),
        hash = content_hash(&a.content),
        editable = a.skill.editable,
        body = escape(&a.content),
    )
}

pub struct SkillActivationMiddleware {
    registry: Arc<dyn SkillRegistry>,
    /// The agent's skill allowlist (`None` = every skill).
    available: Option<HashSet<String>>,
    owner_token: Arc<str>,
}

/// Building a skill middleware without an owner token.
#[derive(Debug, thiserror::Error)]
#[error("the skill middlewares need a non-empty shared owner token")]
pub struct MissingOwnerToken;

/// The constructor both skill middlewares share: the registry, the allow-list as a set and the
/// (checked, non-empty) owner token.
macro_rules! skill_scoped_new {
    ($ty:ident) => {
        impl $ty {
            pub fn new(
                registry: Arc<dyn SkillRegistry>,
                available: Option<Vec<String>>,
                owner_token: Arc<str>,
            ) -> Result<Self, $crate::skill_activation::MissingOwnerToken> {
                if owner_token.is_empty() {
                    return Err($crate::skill_activation::MissingOwnerToken);
                }
                Ok($ty {
                    registry,
                    available: available.map(|v| v.into_iter().collect()),
                    owner_token,
                })
            }
        }
    };
}
pub(crate) use skill_scoped_new;

skill_scoped_new!(SkillActivationMiddleware);

/// The enabled, allowed skill `name` and its `SKILL.md` text.
fn resolve(
    registry: &dyn SkillRegistry,
    available: Option<&HashSet<String>>,
    name: &str,
) -> Result<(SkillRecord, String), Refusal> {
    let skills = registry.load().map_err(|e| {
        tracing::warn!(error = %e, "skill registry cannot be loaded");
        Refusal::Unresolvable
    })?;
    let skill = skills
        .into_iter()
        .find(|s| s.name == name)
        .ok_or(Refusal::NotInstalled)?;
    if !skill.enabled {
        return Err(Refusal::Disabled);
    }
    if available.is_some_and(|a| !a.contains(name)) {
        return Err(Refusal::NotAvailable);
    }
    let content = read_skill_file(&skill).map_err(|e| {
        tracing::warn!(skill = name, error = %e, "slash skill file refused");
        Refusal::Unsafe
    })?;
    Ok((skill, content))
}

/// The text a slash command is looked for in: the user's own text when the server decorated
/// the message (uploads, sanitization).
fn command_text(h: &HumanMessage) -> String {
    match h.additional_kwargs.get(ORIGINAL_USER_CONTENT) {
        Some(Value::String(s)) => s.clone(),
        _ => h.content.text(),
    }
}

fn run_key(h: &HumanMessage, text: &str) -> String {
    match h.id.as_deref().filter(|s| !s.is_empty()) {
        Some(id) => id.to_owned(),
        None => format!("sha256:{}", content_hash(text)),
    }
}

fn already_activated(messages: &[Arc<Message>], index: usize, target: &HumanMessage) -> bool {
    if index > 0 && is_activation_reminder(&messages[index - 1]) {
        return true;
    }
    let Some(id) = target.id.as_deref() else {
        return false;
    };
    let own_id = format!("{id}{ID_SUFFIX}");
    messages[..index].iter().any(|m| {
        is_activation_reminder(m)
            && (m.additional_kwargs().get(SLASH_SKILL_ACTIVATION_TARGET_ID)
                == Some(&Value::String(id.to_owned()))
                || m.id() == Some(own_id.as_str()))
    })
}

#[async_trait]
impl Middleware for SkillActivationMiddleware {
    middleware_identity!("SkillActivationMiddleware", HookSet::WRAP_MODEL);

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        let found = req
            .messages
            .iter()
            .enumerate()
            .rev()
            .find(|(_, m)| m.is_real_user_message())
            .and_then(|(i, m)| Some((i, m.as_human()?)));
        let Some((index, human)) = found else {
            return next.run(req).await;
        };
        let text = command_text(human);
        // The cheap test first: most turns are not slash commands (and copy nothing).
        let Some((name, remaining)) = parse_slash(&text) else {
            return next.run(req).await;
        };
        let target = human.clone();
        let key = run_key(&target, &text);
        if already_activated(&req.messages, index, &target)
            || req.run.get(&ACTIVATION_RUN).as_deref() == Some(key.as_str())
        {
            return next.run(req).await;
        }
        let run = req.run.clone();
        let (registry, available, lookup) =
            (self.registry.clone(), self.available.clone(), name.clone());
        // Registry scans and file reads are blocking.
        let resolved =
            tokio::task::spawn_blocking(move || resolve(&*registry, available.as_ref(), &lookup))
                .await
                .unwrap_or(Err(Refusal::Unresolvable));
        let (skill, content) = match resolved {
            Ok(found) => found,
            Err(why) => {
                tracing::info!(skill = %name, reason = ?why, "slash skill not activated");
                let mut ai = AiMessage {
                    id: Some(req.message_id.clone()),
                    content: Content::Text(refusal(&name, why)),
                    ..Default::default()
                };
                ai.response_metadata
                    .insert("finish_reason".into(), json!("stop"));
                return Ok(ModelResponse::from(ai));
            }
        };
        let activation = Activation {
            skill,
            content,
            remaining,
        };
        if run.observed() {
            let payload = json!({
                "skill_name": activation.skill.name,
                "category": activation.skill.category,
                "path": activation.skill.container_file,
                "content_hash": content_hash(&activation.content),
            });
            run.observe(&RunEvent::Middleware {
                name: "skill_activation",
                action: "activate",
                payload: &payload,
            });
        }
        run.set(&ACTIVATION_RUN, key);
        run.set(
            &SLASH_SOURCE,
            SlashSource {
                path: activation.skill.container_file.clone(),
                owner_token: self.owner_token.clone(),
            },
        );
        let target_id = target
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut reminder = HumanMessage {
            content: Content::Text(reminder_text(&activation)),
            id: Some(format!("{target_id}{ID_SUFFIX}")),
            ..Default::default()
        };
        markers::mark_hidden(&mut reminder.additional_kwargs);
        reminder
            .additional_kwargs
            .insert(SLASH_SKILL_ACTIVATION.into(), Value::Bool(true));
        reminder.additional_kwargs.insert(
            SLASH_SKILL_ACTIVATION_TARGET_ID.into(),
            target.id.clone().map(Value::String).unwrap_or(Value::Null),
        );
        tracing::info!(skill = %activation.skill.name, "slash skill activated");
        req.messages_mut()
            .insert(index, Arc::new(Message::Human(reminder)));
        next.run(req).await
    }
}
