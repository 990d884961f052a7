//! Guardrail (chain S9 authorization / S10 configured provider, wrap_tool): a pluggable provider
//! allows or denies every tool call before it runs (spec 30 §GuardrailMiddleware, spec 60 §19).
//!
//! Sits outside the bash audit, ToolErrorHandling and every lead-only tool wrapper, so a denied
//! call never reaches them or the tool: the model gets an error result in DeerFlow's words and
//! can choose another way. A provider that fails blocks the call (`fail_closed`, the default)
//! or lets it through; either way the decision is audited through the run's observers
//! (DeerFlow's run journal), as is every denial. Allowed calls are not audited.
//!
//! Several instances may sit in one chain (authorization in front of the configured provider);
//! each has its own name — `GuardrailMiddleware`, `GuardrailMiddleware[authorization]` — since
//! names key `updates` nodes and must be unique (DESIGN §7).

use std::collections::HashSet;
use std::sync::Arc;

use antler_protocol::{Object, ToolMessage};
use antler_runtime::{
    HookSet, Middleware, RunContext, RunEvent, ToolCallRequest, ToolError, ToolNext, ToolOutcome,
};
use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};

use crate::hook::ToolResult;
use crate::py::truthy;

/// `guardrails:` (spec 60 §19); its `provider` is built by [`provider_from_config`].
pub use antler_config::GuardrailsConfig;

/// The name of the configured-provider instance.
pub const NAME: &str = "GuardrailMiddleware";

/// The built-in provider's class path in `guardrails.provider.use`.
pub const ALLOWLIST_PROVIDER: &str = "deerflow.guardrails.builtin:AllowlistProvider";

/// Longest reason message kept in an audit record.
const MAX_AUDIT_REASON_CHARS: usize = 500;

/// What a provider is asked about one tool call.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GuardrailRequest {
    pub tool_name: String,
    /// The call's arguments.
    pub tool_input: Object,
    /// The configured passport.
    pub agent_id: Option<String>,
    pub thread_id: Option<String>,
    pub is_subagent: bool,
    /// UTC, ISO-8601.
    pub timestamp: String,
    pub user_id: Option<String>,
    pub user_role: Option<String>,
    pub oauth_provider: Option<String>,
    pub oauth_id: Option<String>,
    pub run_id: Option<String>,
    pub tool_call_id: Option<String>,
    pub channel_user_id: Option<String>,
    /// True only when the run context says exactly `true`.
    pub is_internal: bool,
    pub authz_attributes: Object,
}

/// One reason for a decision (an OAP reason object).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GuardrailReason {
    pub code: String,
    pub message: String,
}

impl GuardrailReason {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        GuardrailReason {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// A provider's verdict (an OAP decision object).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GuardrailDecision {
    pub allow: bool,
    pub reasons: Vec<GuardrailReason>,
    pub policy_id: Option<String>,
    pub metadata: Object,
}

impl GuardrailDecision {
    pub fn allow() -> Self {
        GuardrailDecision {
            allow: true,
            ..Default::default()
        }
    }

    pub fn deny(reasons: Vec<GuardrailReason>) -> Self {
        GuardrailDecision {
            allow: false,
            reasons,
            ..Default::default()
        }
    }

    pub fn with_reason(mut self, reason: GuardrailReason) -> Self {
        self.reasons.push(reason);
        self
    }

    pub fn with_policy(mut self, policy_id: impl Into<String>) -> Self {
        self.policy_id = Some(policy_id.into());
        self
    }
}

/// A provider could not decide.
#[derive(Debug, thiserror::Error)]
pub enum GuardrailError {
    #[error("guardrail provider failed: {0}")]
    Provider(String),
}

/// Decides whether tool calls may run.
#[async_trait]
pub trait GuardrailProvider: Send + Sync {
    /// Short name for logs.
    fn name(&self) -> &str;

    async fn evaluate(
        &self,
        request: &GuardrailRequest,
    ) -> Result<GuardrailDecision, GuardrailError>;
}

/// The built-in allow/deny-list provider: with an allowlist (even an empty one) only listed
/// tools pass; listed in the denylist never passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowlistProvider {
    /// `None` = every tool; `Some(empty)` = none.
    allowed: Option<HashSet<String>>,
    denied: HashSet<String>,
}

impl AllowlistProvider {
    pub fn new(allowed_tools: Option<Vec<String>>, denied_tools: Option<Vec<String>>) -> Self {
        AllowlistProvider {
            allowed: allowed_tools.map(|v| v.into_iter().collect()),
            denied: denied_tools.unwrap_or_default().into_iter().collect(),
        }
    }

    /// From `guardrails.provider.config`: `allowed_tools` (null = all, `[]` = none) and
    /// `denied_tools`.
    pub fn from_config(config: &Object) -> Result<Self, GuardrailConfigError> {
        let list = |key: &str| -> Result<Option<Vec<String>>, GuardrailConfigError> {
            match config.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_owned).ok_or_else(|| {
                            GuardrailConfigError::BadOption(
                                key.to_owned(),
                                "every entry must be a tool name".to_owned(),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(_) => Err(GuardrailConfigError::BadOption(
                    key.to_owned(),
                    "expected a list of tool names or null".to_owned(),
                )),
            }
        };
        Ok(Self::new(list("allowed_tools")?, list("denied_tools")?))
    }

    /// The synchronous decision.
    pub fn decide(&self, tool_name: &str) -> GuardrailDecision {
        if self
            .allowed
            .as_ref()
            .is_some_and(|a| !a.contains(tool_name))
        {
            return GuardrailDecision::deny(vec![GuardrailReason::new(
                "oap.tool_not_allowed",
                format!("tool '{tool_name}' not in allowlist"),
            )]);
        }
        if self.denied.contains(tool_name) {
            return GuardrailDecision::deny(vec![GuardrailReason::new(
                "oap.tool_not_allowed",
                format!("tool '{tool_name}' is denied"),
            )]);
        }
        GuardrailDecision::allow().with_reason(GuardrailReason::new("oap.allowed", ""))
    }
}

#[async_trait]
impl GuardrailProvider for AllowlistProvider {
    fn name(&self) -> &str {
        "allowlist"
    }

    async fn evaluate(
        &self,
        request: &GuardrailRequest,
    ) -> Result<GuardrailDecision, GuardrailError> {
        Ok(self.decide(&request.tool_name))
    }
}

/// A `guardrails.provider` entry antler cannot build.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuardrailConfigError {
    #[error("unknown guardrail provider '{0}' (built in: {ALLOWLIST_PROVIDER})")]
    UnknownProvider(String),
    #[error("guardrails.provider.config.{0}: {1}")]
    BadOption(String, String),
}

/// Build the provider a `guardrails.provider` entry (`use` + `config`) names.
pub fn provider_from_config(
    use_path: &str,
    config: &Object,
) -> Result<Arc<dyn GuardrailProvider>, GuardrailConfigError> {
    match use_path.trim() {
        ALLOWLIST_PROVIDER => Ok(Arc::new(AllowlistProvider::from_config(config)?)),
        other => Err(GuardrailConfigError::UnknownProvider(other.to_owned())),
    }
}

/// Evaluates every tool call with a provider before it runs.
pub struct GuardrailMiddleware {
    name: String,
    provider: Arc<dyn GuardrailProvider>,
    fail_closed: bool,
    passport: Option<String>,
}

impl GuardrailMiddleware {
    pub fn new(provider: Arc<dyn GuardrailProvider>, settings: &GuardrailsConfig) -> Self {
        GuardrailMiddleware {
            name: NAME.to_owned(),
            provider,
            fail_closed: settings.fail_closed,
            passport: settings.passport.clone(),
        }
    }

    /// Name this instance `GuardrailMiddleware[<label>]` (e.g. `authorization`), so two
    /// guardrails can share a chain.
    pub fn with_label(mut self, label: &str) -> Self {
        self.name = format!("{NAME}[{label}]");
        self
    }

    pub fn fail_closed(&self) -> bool {
        self.fail_closed
    }

    fn build_request(&self, req: &ToolCallRequest) -> Result<GuardrailRequest, ToolError> {
        let run = &req.run;
        let authz_attributes = match context_value(run, "authz_attributes") {
            None | Some(Value::Null) => Object::new(),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(ToolError::Failed(format!(
                    "authz_attributes must be a mapping, got {}",
                    json_type(&other)
                )))
            }
        };
        Ok(GuardrailRequest {
            tool_name: req.call.name.clone(),
            tool_input: req.call.args.clone(),
            agent_id: self.passport.clone(),
            thread_id: Some(run.thread_id.clone()).filter(|s| !s.is_empty()),
            is_subagent: context_value(run, "is_subagent").is_some_and(|v| truthy(&v)),
            timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false),
            user_id: run.user_id.clone().or_else(|| context_str(run, "user_id")),
            user_role: context_str(run, "user_role"),
            oauth_provider: context_str(run, "oauth_provider"),
            oauth_id: context_str(run, "oauth_id"),
            run_id: Some(run.run_id.clone()).filter(|s| !s.is_empty()),
            tool_call_id: req.call.id.clone(),
            channel_user_id: context_str(run, "channel_user_id"),
            is_internal: context_value(run, "is_internal") == Some(Value::Bool(true)),
            authz_attributes,
        })
    }

    /// Report a security-relevant decision to the run's observers (the journal).
    fn audit(
        &self,
        run: &RunContext,
        request: &GuardrailRequest,
        decision: &GuardrailDecision,
        action: &str,
        provider_error: bool,
    ) {
        if !run.observed() {
            return;
        }
        let codes: Vec<&str> = decision
            .reasons
            .iter()
            .map(|r| r.code.as_str())
            .filter(|c| !c.is_empty())
            .collect();
        let messages: Vec<String> = decision
            .reasons
            .iter()
            .filter(|r| !r.message.is_empty())
            .map(|r| r.message.chars().take(MAX_AUDIT_REASON_CHARS).collect())
            .collect();
        let payload = json!({
            "tag": "guardrail",
            "hook": "wrap_tool_call",
            "changes": {
                "tool_name": request.tool_name,
                "tool_call_id": request.tool_call_id,
                "agent_id": request.agent_id,
                "is_subagent": request.is_subagent,
                "user_role": request.user_role,
                "allow": decision.allow,
                "policy_id": decision.policy_id,
                "reason_codes": codes,
                "reason_messages": messages,
                "fail_closed": self.fail_closed,
                "provider_error": provider_error,
            }
        });
        run.observe(&RunEvent::Middleware {
            name: &self.name,
            action,
            payload: &payload,
        });
    }
}

/// The error result a denied call gets (DeerFlow's wording).
pub fn denied_message(req: &ToolCallRequest, decision: &GuardrailDecision) -> ToolMessage {
    let name = if req.call.name.is_empty() {
        "unknown_tool"
    } else {
        req.call.name.as_str()
    };
    let id = req
        .call
        .id
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("missing_id");
    let (code, reason) = match decision.reasons.first() {
        Some(r) => (r.code.as_str(), r.message.as_str()),
        None => ("oap.denied", "blocked by guardrail policy"),
    };
    ToolMessage::error(
        id,
        format!(
            "Guardrail denied: tool '{name}' was blocked ({code}). Reason: {reason}. Choose an alternative approach."
        ),
    )
    .with_name(name)
}

/// A run-context value: run-scoped values first, then the run's options.
fn context_value(run: &RunContext, key: &str) -> Option<Value> {
    run.options.extra.get(key).cloned()
}

fn context_str(run: &RunContext, key: &str) -> Option<String> {
    match context_value(run, key)? {
        Value::String(s) => Some(s),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

#[async_trait]
impl Middleware for GuardrailMiddleware {
    fn name(&self) -> &str {
        &self.name
    }

    fn hooks(&self) -> HookSet {
        HookSet::WRAP_TOOL
    }

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let request = self.build_request(&req)?;
        let decision = match self.provider.evaluate(&request).await {
            Ok(d) => d,
            Err(e) if self.fail_closed => {
                tracing::error!(provider = %self.provider.name(), error = %e, tool = %request.tool_name, "guardrail provider failed; blocking the call");
                let decision = GuardrailDecision::deny(vec![GuardrailReason::new(
                    "oap.evaluator_error",
                    "guardrail provider error (fail-closed)",
                )]);
                self.audit(&req.run, &request, &decision, "deny_tool_call", true);
                return Ok(ToolOutcome::Message(denied_message(&req, &decision)));
            }
            Err(e) => {
                tracing::error!(provider = %self.provider.name(), error = %e, tool = %request.tool_name, "guardrail provider failed; allowing the call (fail-open)");
                let decision = GuardrailDecision::allow().with_reason(GuardrailReason::new(
                    "oap.evaluator_error",
                    "guardrail provider error (fail-open)",
                ));
                self.audit(
                    &req.run,
                    &request,
                    &decision,
                    "allow_tool_call_after_provider_error",
                    true,
                );
                return next.run(req).await;
            }
        };
        if !decision.allow {
            tracing::warn!(
                tool = %request.tool_name,
                policy = ?decision.policy_id,
                code = decision.reasons.first().map_or("unknown", |r| r.code.as_str()),
                "guardrail denied a tool call"
            );
            self.audit(&req.run, &request, &decision, "deny_tool_call", false);
            return Ok(ToolOutcome::Message(denied_message(&req, &decision)));
        }
        next.run(req).await
    }
}
