//! SkillToolPolicy (chain L3 / U2; wrap_model, wrap_tool): a skill's `allowed-tools` applies
//! once the skill is *active* — the model is offered only the allowed tools, calls to others
//! are refused, and `tool_search` can neither reveal nor promote them (spec 30
//! §SkillToolPolicy). Behavioural scoping, not a security boundary.
//!
//! Which skills are active, per request:
//!
//! 1. a `/skill` the user activated in this run (published by SkillActivation with this
//!    chain's owner token) — it dominates for the rest of the run;
//! 2. else the skills whose `SKILL.md` the agent read (`skill_context`, by path);
//! 3. else none: merely enabled skills never restrict tools.
//!
//! Allowed tools: the union of the active skills' `allowed-tools` plus the framework tools
//! (`describe_skill`, `read_file`, `review_skill_package`, `tool_search`); when no active skill
//! declares the field at all, nothing is restricted. Unknown, disabled or not-allowlisted
//! paths are skipped; when none resolves (or the registry cannot be read) only the framework
//! tools remain — fail closed.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use antler_protocol::{Message, ThreadState, ToolMessage, ToolStatus};
use antler_runtime::{
    HookSet, Middleware, ModelNext, ModelRequest, RunContext, RunKey, ToolCallRequest, ToolNext,
    ToolOutcome,
};
use async_trait::async_trait;
use serde_json::Value;

use crate::hook::{ModelResult, ToolResult};
use crate::skill_activation::skill_scoped_new;
use crate::skill_registry::{normalize, SkillRegistry, SLASH_SOURCE};

/// Tools every active policy keeps (`task` is deliberately not one).
pub const FRAMEWORK_TOOLS: &[&str] = &[
    "describe_skill",
    "read_file",
    "review_skill_package",
    "tool_search",
];

/// Where the active skills came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    Slash,
    SkillContext,
    Passive,
}

impl PolicySource {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::Slash => "slash",
            PolicySource::SkillContext => "skill_context",
            PolicySource::Passive => "passive",
        }
    }
}

/// The middleware's name in chain listings.
pub const NAME: &str = "SkillToolPolicyMiddleware";

/// The policy a model step computed, reused by that step's tool calls.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyDecision {
    pub version: u32,
    pub owner_token: Arc<str>,
    pub source: PolicySource,
    pub active_paths: Vec<String>,
    /// Sorted; `None` = unrestricted.
    pub allowed_names: Option<Vec<String>>,
}

/// Version of [`PolicyDecision`] this build writes and accepts.
const DECISION_VERSION: u32 = 2;

pub const DECISION: RunKey<PolicyDecision> = RunKey::new("__skill_tool_policy_decision");

pub struct SkillToolPolicyMiddleware {
    registry: Arc<dyn SkillRegistry>,
    available: Option<HashSet<String>>,
    owner_token: Arc<str>,
}

skill_scoped_new!(SkillToolPolicyMiddleware);

impl SkillToolPolicyMiddleware {
    fn source(&self, state: &ThreadState, run: &RunContext) -> (PolicySource, Vec<String>) {
        if let Some(slash) = run
            .get(&SLASH_SOURCE)
            .filter(|s| s.owner_token == self.owner_token)
        {
            return (PolicySource::Slash, vec![normalize(&slash.path)]);
        }
        let paths: Vec<String> = state
            .skill_context
            .iter()
            .filter(|e| !e.path.is_empty())
            .map(|e| normalize(&e.path))
            .collect();
        if paths.is_empty() {
            (PolicySource::Passive, Vec::new())
        } else {
            (PolicySource::SkillContext, paths)
        }
    }

    async fn decide(&self, source: PolicySource, paths: Vec<String>) -> PolicyDecision {
        let allowed_names = if source == PolicySource::Passive {
            None
        } else {
            let (registry, available, p) =
                (self.registry.clone(), self.available.clone(), paths.clone());
            // The registry scan is blocking.
            tokio::task::spawn_blocking(move || allowed_for(&*registry, available.as_ref(), &p))
                .await
                .unwrap_or_else(|_| Some(FRAMEWORK_TOOLS.iter().map(|s| (*s).to_owned()).collect()))
        };
        PolicyDecision {
            version: DECISION_VERSION,
            owner_token: self.owner_token.clone(),
            source,
            active_paths: paths,
            allowed_names,
        }
    }
}

/// Allowed tool names for the active `paths` (`None` = unrestricted).
fn allowed_for(
    registry: &dyn SkillRegistry,
    available: Option<&HashSet<String>>,
    paths: &[String],
) -> Option<Vec<String>> {
    let framework = || -> Option<Vec<String>> {
        Some(FRAMEWORK_TOOLS.iter().map(|s| (*s).to_owned()).collect())
    };
    let skills = match registry.load() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "skill registry cannot be loaded; only framework tools stay available");
            return framework();
        }
    };
    let mut seen = HashSet::new();
    let mut resolved = Vec::new();
    for path in paths {
        let Some(skill) = skills
            .iter()
            .find(|s| normalize(&s.container_file) == *path)
        else {
            tracing::warn!(path, "active skill path is not installed; skipped");
            continue;
        };
        if !skill.enabled || available.is_some_and(|a| !a.contains(&skill.name)) {
            tracing::warn!(skill = %skill.name, "active skill is disabled or not available for this agent; skipped");
            continue;
        }
        if seen.insert(skill.name.clone()) {
            resolved.push(skill);
        }
    }
    if resolved.is_empty() {
        return framework();
    }
    if resolved.iter().all(|s| s.allowed_tools.is_none()) {
        return None;
    }
    let mut names: BTreeSet<String> = FRAMEWORK_TOOLS.iter().map(|s| (*s).to_owned()).collect();
    for s in resolved {
        names.extend(s.allowed_tools.iter().flatten().cloned());
    }
    Some(names.into_iter().collect())
}

fn refusal(req: &ToolCallRequest, text: String) -> ToolOutcome {
    let mut msg = ToolMessage::error(req.call.id_str(), text).with_name(req.call.name.clone());
    msg.id = Some(uuid::Uuid::new_v4().to_string());
    msg.status = ToolStatus::Error;
    ToolOutcome::Message(msg)
}

/// Keep only permitted tools in a `tool_search` result, or refuse one that is not shaped as
/// `tool_search` results are.
fn filter_tool_search(
    req: &ToolCallRequest,
    outcome: ToolOutcome,
    allowed: &HashSet<&str>,
) -> ToolOutcome {
    const INVALID: &str = "Error: tool_search returned a result that could not be validated against the active skill policy.";
    let ToolOutcome::Command(mut cmd) = outcome else {
        return refusal(req, INVALID.to_owned());
    };
    let tool_messages = cmd
        .update
        .messages
        .iter()
        .flatten()
        .filter(|m| matches!(m, Message::Tool(t) if t.name.as_deref() == Some("tool_search")))
        .count();
    let Some(promoted) = cmd.update.promoted.as_mut().filter(|_| tool_messages == 1) else {
        return refusal(req, INVALID.to_owned());
    };
    promoted.names.retain(|n| allowed.contains(n.as_str()));
    for m in cmd.update.messages.iter_mut().flatten() {
        let Message::Tool(t) = m else { continue };
        let Ok(Value::Array(schemas)) = serde_json::from_str::<Value>(&t.content.text()) else {
            continue;
        };
        let kept: Vec<Value> = schemas
            .into_iter()
            .filter(|s| {
                let name = s
                    .get("name")
                    .or_else(|| s.get("function").and_then(|f| f.get("name")))
                    .and_then(Value::as_str);
                name.is_some_and(|n| allowed.contains(n))
            })
            .collect();
        t.content = if kept.is_empty() {
            "No tools found matching the active skill policy.".into()
        } else {
            serde_json::to_string_pretty(&kept)
                .unwrap_or_default()
                .into()
        };
    }
    ToolOutcome::Command(cmd)
}

#[async_trait]
impl Middleware for SkillToolPolicyMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL | HookSet::WRAP_TOOL);

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        let (source, paths) = self.source(&req.state, &req.run);
        if source == PolicySource::Passive {
            req.run.remove(&DECISION);
            return next.run(req).await;
        }
        let decision = self.decide(source, paths).await;
        if let Some(allowed) = &decision.allowed_names {
            let before = req.tools.len();
            req.tools.retain(|t| allowed.iter().any(|a| *a == t.name));
            tracing::debug!(
                source = source.as_str(),
                offered = req.tools.len(),
                hidden = before - req.tools.len(),
                "skill tool policy applied"
            );
        }
        req.run.set(&DECISION, decision);
        next.run(req).await
    }

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let (source, paths) = self.source(&req.state, &req.run);
        if source == PolicySource::Passive {
            return next.run(req).await;
        }
        let stored = req.run.get(&DECISION).filter(|d| {
            d.version == DECISION_VERSION
                && d.owner_token == self.owner_token
                && d.source == source
                && d.active_paths == paths
        });
        let decision = match stored {
            Some(d) => d,
            None => self.decide(source, paths).await,
        };
        let Some(allowed) = decision.allowed_names else {
            return next.run(req).await;
        };
        if !allowed.contains(&req.call.name) {
            tracing::info!(tool = %req.call.name, "tool call refused by the active skill policy");
            let text = format!(
                "Error: Tool '{}' is not allowed by the active skill policy.",
                req.call.name
            );
            return Ok(refusal(&req, text));
        }
        let is_search = req.call.name == "tool_search";
        let copy = is_search.then(|| req.clone());
        let outcome = next.run(req).await?;
        match copy {
            Some(r) => {
                let allowed: HashSet<&str> = allowed.iter().map(String::as_str).collect();
                Ok(filter_tool_search(&r, outcome, &allowed))
            }
            None => Ok(outcome),
        }
    }
}
