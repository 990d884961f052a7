//! Guardrail: the allowlist provider, the decision, fail-closed/open, audit, attribution,
//! config, and distinct names.

use std::sync::{Arc, Mutex};

use antler_middleware::guardrail::*;
use antler_middleware::tool_error_handling::ToolErrorHandlingMiddleware;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Content, Object, ToolStatus};
use antler_runtime::*;
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::{json, Map, Value};

use super::common::*;
use crate::common::run_ok;

fn names(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| (*s).to_owned()).collect())
}

fn allowed(p: &AllowlistProvider, tool: &str) -> bool {
    p.decide(tool).allow
}

// -------------------------------------------------------------------------- allowlist

#[test]
fn allowlist_provider_rules() {
    let open = AllowlistProvider::new(None, None);
    assert!(allowed(&open, "bash") && allowed(&open, "anything"));
    assert_eq!(open.decide("bash").reasons[0].code, "oap.allowed");

    let deny = AllowlistProvider::new(None, names(&["bash", "write_file"]));
    assert!(!allowed(&deny, "bash"));
    assert!(allowed(&deny, "web_search"));
    assert_eq!(
        deny.decide("bash").reasons,
        [GuardrailReason::new(
            "oap.tool_not_allowed",
            "tool 'bash' is denied"
        )]
    );

    let allow = AllowlistProvider::new(names(&["web_search", "read_file"]), None);
    assert!(allowed(&allow, "web_search"));
    assert!(!allowed(&allow, "bash"));
    assert_eq!(
        allow.decide("bash").reasons,
        [GuardrailReason::new(
            "oap.tool_not_allowed",
            "tool 'bash' not in allowlist"
        )]
    );

    // An empty allowlist allows nothing (not "no allowlist").
    let none = AllowlistProvider::new(Some(Vec::new()), None);
    assert!(!allowed(&none, "web_search") && !allowed(&none, "read_file"));

    let both = AllowlistProvider::new(names(&["web_search", "bash"]), names(&["bash"]));
    assert!(allowed(&both, "web_search"));
    assert!(!allowed(&both, "bash"));
    assert!(!allowed(&both, "read_file"));
}

#[tokio::test]
async fn the_async_evaluation_is_the_sync_decision() {
    let p = AllowlistProvider::new(None, names(&["bash"]));
    let req = GuardrailRequest {
        tool_name: "bash".into(),
        ..Default::default()
    };
    assert_eq!(p.evaluate(&req).await.unwrap(), p.decide("bash"));
    let as_dyn: Arc<dyn GuardrailProvider> = Arc::new(p);
    assert_eq!(as_dyn.name(), "allowlist");
}

// -------------------------------------------------------------------------- providers

struct Fixed(GuardrailDecision);

#[async_trait]
impl GuardrailProvider for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    async fn evaluate(&self, _: &GuardrailRequest) -> Result<GuardrailDecision, GuardrailError> {
        Ok(self.0.clone())
    }
}

struct Exploding;

#[async_trait]
impl GuardrailProvider for Exploding {
    fn name(&self) -> &str {
        "exploding"
    }
    async fn evaluate(&self, _: &GuardrailRequest) -> Result<GuardrailDecision, GuardrailError> {
        Err(GuardrailError::Provider("evaluator down".into()))
    }
}

#[derive(Default)]
struct Capturing(Mutex<Vec<GuardrailRequest>>);

#[async_trait]
impl GuardrailProvider for Capturing {
    fn name(&self) -> &str {
        "capture"
    }
    async fn evaluate(&self, r: &GuardrailRequest) -> Result<GuardrailDecision, GuardrailError> {
        self.0.lock().unwrap().push(r.clone());
        Ok(GuardrailDecision::allow())
    }
}

fn deny_all() -> Arc<dyn GuardrailProvider> {
    Arc::new(Fixed(
        GuardrailDecision::deny(vec![GuardrailReason::new(
            "oap.denied",
            "all tools blocked",
        )])
        .with_policy("test.deny.v1"),
    ))
}

fn allow_all() -> Arc<dyn GuardrailProvider> {
    Arc::new(Fixed(GuardrailDecision::allow()))
}

/// Middleware events seen by the run's observers.
#[derive(Default)]
struct Journal(Mutex<Vec<(String, String, Value)>>);

impl RunObserver for Journal {
    fn on_event(&self, _: &RunContext, event: &RunEvent<'_>) {
        if let RunEvent::Middleware {
            name,
            action,
            payload,
        } = event
        {
            self.0.lock().unwrap().push((
                (*name).to_owned(),
                (*action).to_owned(),
                (*payload).clone(),
            ));
        }
    }
}

struct Outcome {
    result: Result<ToolOutcome, ToolError>,
    tool_calls: usize,
    journal: Vec<(String, String, Value)>,
}

async fn guard(
    mw: GuardrailMiddleware,
    call: antler_protocol::ToolCall,
    run: RunContext,
) -> Outcome {
    let journal = Arc::new(Journal::default());
    let run = Arc::new(run.with_observer(journal.clone()));
    let echo = Echo::new(&call.name);
    let chain = Chain::new(vec![Arc::new(mw)]).unwrap();
    let result = chain
        .call_tool(tool_request(call, Some(echo.clone()), run))
        .await;
    let journal = journal.0.lock().unwrap().clone();
    Outcome {
        result,
        tool_calls: echo.count(),
        journal,
    }
}

/// `guard` through a middleware over `provider` with `settings(fail_closed)` and a plain run.
async fn guarded(
    provider: Arc<dyn GuardrailProvider>,
    fail_closed: bool,
    call: antler_protocol::ToolCall,
) -> Outcome {
    guard(
        GuardrailMiddleware::new(provider, &settings(fail_closed)),
        call,
        plain_run(),
    )
    .await
}

fn plain_run() -> RunContext {
    RunContext::new("t1", "r1", Arc::new(NullSink))
}

fn message(o: &Outcome) -> antler_protocol::ToolMessage {
    match o.result.as_ref().unwrap() {
        ToolOutcome::Message(m) => m.clone(),
        ToolOutcome::Command(c) => panic!("unexpected command {c:?}"),
    }
}

fn settings(fail_closed: bool) -> GuardrailsConfig {
    GuardrailsConfig {
        enabled: true,
        fail_closed,
        passport: None,
        provider: None,
    }
}

// ------------------------------------------------------------------------- middleware

#[tokio::test]
async fn an_allowed_call_runs_unchanged() {
    let o = guarded(
        allow_all(),
        true,
        call("c1", "web_search", json!({"query": "rust"})),
    )
    .await;
    assert_eq!(o.tool_calls, 1);
    let m = message(&o);
    assert_eq!(m.status, ToolStatus::Success);
    assert_eq!(m.content, Content::Text(r#"echo {"query":"rust"}"#.into()));
    assert!(o.journal.is_empty(), "allowed calls are not audited");
}

#[tokio::test]
async fn a_denied_call_never_runs_and_says_why() {
    let o = guarded(
        deny_all(),
        true,
        call("tool_call_1", "bash", json!({"command": "cat secret.txt"})),
    )
    .await;
    assert_eq!(o.tool_calls, 0);
    let m = message(&o);
    assert_eq!(m.status, ToolStatus::Error);
    assert_eq!(m.name.as_deref(), Some("bash"));
    assert_eq!(m.tool_call_id, "tool_call_1");
    assert_eq!(
        m.content,
        Content::Text("Guardrail denied: tool 'bash' was blocked (oap.denied). Reason: all tools blocked. Choose an alternative approach.".into())
    );
}

#[tokio::test]
async fn a_denial_without_reasons_uses_the_fallback_text() {
    let o = guarded(
        Arc::new(Fixed(GuardrailDecision::deny(Vec::new()))),
        true,
        call("c1", "bash", json!({})),
    )
    .await;
    assert_eq!(
        message(&o).content,
        Content::Text("Guardrail denied: tool 'bash' was blocked (oap.denied). Reason: blocked by guardrail policy. Choose an alternative approach.".into())
    );
}

#[tokio::test]
async fn empty_names_and_ids_are_handled() {
    let allowed = guarded(allow_all(), true, call("c1", "", json!({}))).await;
    assert_eq!(allowed.tool_calls, 1);

    let mut nameless = call("", "", json!({}));
    nameless.id = None;
    let denied = guarded(deny_all(), true, nameless).await;
    let m = message(&denied);
    assert_eq!(m.tool_call_id, "missing_id");
    assert_eq!(m.name.as_deref(), Some("unknown_tool"));
    assert!(m.text_contains("tool 'unknown_tool' was blocked"));
}

trait TextContains {
    fn text_contains(&self, s: &str) -> bool;
}

impl TextContains for antler_protocol::ToolMessage {
    fn text_contains(&self, s: &str) -> bool {
        self.content.text().contains(s)
    }
}

#[tokio::test]
async fn a_failing_provider_blocks_when_fail_closed() {
    let o = guarded(Arc::new(Exploding), true, call("c1", "bash", json!({}))).await;
    assert_eq!(o.tool_calls, 0);
    let m = message(&o);
    assert_eq!(m.status, ToolStatus::Error);
    assert!(m.text_contains("(oap.evaluator_error)"));
    assert!(m.text_contains("guardrail provider error (fail-closed)"));
    assert_eq!(o.journal.len(), 1);
    let (name, action, payload) = &o.journal[0];
    assert_eq!(
        (name.as_str(), action.as_str()),
        ("GuardrailMiddleware", "deny_tool_call")
    );
    assert_eq!(payload["changes"]["allow"], false);
    assert_eq!(
        payload["changes"]["reason_codes"],
        json!(["oap.evaluator_error"])
    );
    assert_eq!(payload["changes"]["provider_error"], true);
    assert_eq!(payload["changes"]["fail_closed"], true);
}

#[tokio::test]
async fn a_failing_provider_lets_the_call_through_when_fail_open() {
    let o = guarded(Arc::new(Exploding), false, call("c1", "bash", json!({}))).await;
    assert_eq!(o.tool_calls, 1);
    assert_eq!(message(&o).status, ToolStatus::Success);
    assert_eq!(o.journal.len(), 1);
    let (_, action, payload) = &o.journal[0];
    assert_eq!(action, "allow_tool_call_after_provider_error");
    assert_eq!(payload["changes"]["allow"], true);
    assert_eq!(
        payload["changes"]["reason_codes"],
        json!(["oap.evaluator_error"])
    );
    assert_eq!(payload["changes"]["provider_error"], true);
    assert_eq!(payload["changes"]["fail_closed"], false);
}

#[tokio::test]
async fn a_denial_is_audited_without_arguments_or_identity_secrets() {
    let mut run = plain_run();
    run.options.extra.insert("user_role".into(), json!("user"));
    let o = guard(
        GuardrailMiddleware::new(
            deny_all(),
            &GuardrailsConfig {
                passport: Some("agent_id".into()),
                ..settings(true)
            },
        ),
        call("tool_call_1", "bash", json!({"command": "cat secret.txt"})),
        run.with_user(Some("u1".into())),
    )
    .await;
    assert_eq!(o.journal.len(), 1);
    let (name, action, payload) = &o.journal[0];
    assert_eq!(name, "GuardrailMiddleware");
    assert_eq!(action, "deny_tool_call");
    assert_eq!(
        payload,
        &json!({
            "tag": "guardrail",
            "hook": "wrap_tool_call",
            "changes": {
                "tool_name": "bash",
                "tool_call_id": "tool_call_1",
                "agent_id": "agent_id",
                "is_subagent": false,
                "user_role": "user",
                "allow": false,
                "policy_id": "test.deny.v1",
                "reason_codes": ["oap.denied"],
                "reason_messages": ["all tools blocked"],
                "fail_closed": true,
                "provider_error": false,
            }
        })
    );
}

#[tokio::test]
async fn audited_reason_messages_are_capped() {
    let long = "x".repeat(800);
    let o = guard(
        GuardrailMiddleware::new(
            Arc::new(Fixed(GuardrailDecision::deny(vec![GuardrailReason::new(
                "c", long,
            )]))),
            &settings(true),
        ),
        call("c1", "bash", json!({})),
        plain_run(),
    )
    .await;
    assert_eq!(
        o.journal[0].2["changes"]["reason_messages"][0]
            .as_str()
            .unwrap()
            .len(),
        500
    );
}

// ------------------------------------------------------------------------ attribution

async fn captured(run: RunContext, passport: Option<&str>) -> Result<GuardrailRequest, ToolError> {
    let provider = Arc::new(Capturing::default());
    let mw = GuardrailMiddleware::new(
        provider.clone(),
        &GuardrailsConfig {
            passport: passport.map(str::to_owned),
            ..settings(true)
        },
    );
    let o = guard(mw, call("call-9", "bash", json!({"command": "ls"})), run).await;
    o.result?;
    let got = provider.0.lock().unwrap().pop().unwrap();
    Ok(got)
}

#[tokio::test]
async fn the_request_carries_the_call_and_the_passport() {
    let r = captured(plain_run(), Some("./guardrails/passport.json"))
        .await
        .unwrap();
    assert_eq!(r.agent_id.as_deref(), Some("./guardrails/passport.json"));
    assert_eq!(r.tool_name, "bash");
    assert_eq!(
        Value::Object(r.tool_input.clone()),
        json!({"command": "ls"})
    );
    assert_eq!(r.tool_call_id.as_deref(), Some("call-9"));
    assert_eq!(r.thread_id.as_deref(), Some("t1"));
    assert_eq!(r.run_id.as_deref(), Some("r1"));
    assert!(chrono::DateTime::parse_from_rfc3339(&r.timestamp).is_ok());
    assert!(r.timestamp.ends_with("+00:00"));
}

#[tokio::test]
async fn attribution_fields_come_from_the_run_context() {
    // None present.
    let r = captured(plain_run(), None).await.unwrap();
    assert_eq!(
        (
            r.user_id,
            r.user_role,
            r.oauth_provider,
            r.oauth_id,
            r.channel_user_id,
            r.is_subagent,
            r.is_internal
        ),
        (None, None, None, None, None, false, false)
    );
    assert_eq!(r.authz_attributes, Object::new());

    // Partial, from run options.
    let mut run = plain_run();
    run.options.extra.insert("user_role".into(), json!("admin"));
    let r = captured(run, None).await.unwrap();
    assert_eq!(r.user_role.as_deref(), Some("admin"));
    assert_eq!(r.user_id, None);

    // All, from the authenticated user, run options and run-scoped values.
    let mut run = plain_run().with_user(Some("u-42".into()));
    let extra: Map<String, Value> = serde_json::from_value(json!({
        "user_role": "member", "oauth_provider": "github", "oauth_id": "gh-7",
        "channel_user_id": "slack-U1", "is_internal": true,
        "authz_attributes": {"team": "infra"}
    }))
    .unwrap();
    run.options.extra = extra;
    run.options.extra.insert("is_subagent".into(), json!(true));
    let r = captured(run, None).await.unwrap();
    assert_eq!(r.user_id.as_deref(), Some("u-42"));
    assert_eq!(r.user_role.as_deref(), Some("member"));
    assert_eq!(r.oauth_provider.as_deref(), Some("github"));
    assert_eq!(r.oauth_id.as_deref(), Some("gh-7"));
    assert_eq!(r.channel_user_id.as_deref(), Some("slack-U1"));
    assert!(r.is_subagent);
    assert!(r.is_internal);
    assert_eq!(Value::Object(r.authz_attributes), json!({"team": "infra"}));

    // `is_internal` must be exactly true.
    let mut run = plain_run();
    run.options
        .extra
        .insert("is_internal".into(), json!("true"));
    assert!(!captured(run, None).await.unwrap().is_internal);
}

#[tokio::test]
async fn non_mapping_authz_attributes_fail_the_call() {
    let mut run = plain_run();
    run.options
        .extra
        .insert("authz_attributes".into(), json!(["not", "a", "mapping"]));
    let err = captured(run, None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "authz_attributes must be a mapping, got list"
    );
}

// ------------------------------------------------------------------------------ config

#[test]
fn settings_default_and_providers_build_from_config() {
    assert_eq!(
        GuardrailsConfig::default(),
        GuardrailsConfig {
            enabled: false,
            fail_closed: true,
            passport: None,
            provider: None,
        }
    );
    let cfg: Object = serde_json::from_value(json!({"denied_tools": ["bash"]})).unwrap();
    let p = provider_from_config(ALLOWLIST_PROVIDER, &cfg).unwrap();
    assert_eq!(p.name(), "allowlist");
    assert_eq!(
        AllowlistProvider::from_config(&cfg).unwrap(),
        AllowlistProvider::new(None, names(&["bash"]))
    );
    let cfg: Object =
        serde_json::from_value(json!({"allowed_tools": [], "denied_tools": null})).unwrap();
    assert_eq!(
        AllowlistProvider::from_config(&cfg).unwrap(),
        AllowlistProvider::new(Some(Vec::new()), None)
    );
    assert_eq!(
        provider_from_config("my.module:Custom", &Object::new()).err(),
        Some(GuardrailConfigError::UnknownProvider(
            "my.module:Custom".into()
        ))
    );
    let bad: Object = serde_json::from_value(json!({"allowed_tools": "bash"})).unwrap();
    assert!(matches!(
        AllowlistProvider::from_config(&bad),
        Err(GuardrailConfigError::BadOption(k, _)) if k == "allowed_tools"
    ));
}

#[test]
fn two_guardrails_share_a_chain_under_distinct_names() {
    let authz = GuardrailMiddleware::new(allow_all(), &settings(true)).with_label("authorization");
    let configured = GuardrailMiddleware::new(allow_all(), &settings(true));
    let chain = Chain::new(vec![Arc::new(authz), Arc::new(configured)]).unwrap();
    assert_eq!(
        chain.names(),
        ["GuardrailMiddleware[authorization]", "GuardrailMiddleware"]
    );
    let dup = Chain::new(vec![
        Arc::new(GuardrailMiddleware::new(allow_all(), &settings(true))),
        Arc::new(GuardrailMiddleware::new(allow_all(), &settings(true))),
    ]);
    assert!(dup.is_err());
}

// ------------------------------------------------------------------------ the loop

#[tokio::test]
async fn through_the_loop_a_denied_call_is_answered_and_the_model_adapts() {
    let echo = Echo::new("bash");
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "bash", json!({"command": "rm -rf /"})),
        ScriptedReply::text("I'll do it another way."),
    ]));
    let provider = Arc::new(AllowlistProvider::new(None, names(&["bash"])));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(echo.clone()))
        .with_chain(
            Chain::new(vec![
                Arc::new(GuardrailMiddleware::new(provider, &settings(true))),
                Arc::new(ToolErrorHandlingMiddleware::new()),
            ])
            .unwrap(),
        );
    run_ok(&agent, "clean up", Arc::new(plain_run())).await;
    assert_eq!(echo.count(), 0);
    let sent = &model.requests()[1].messages;
    let denial = result_for(sent, "c1").unwrap();
    assert_eq!(denial.status, ToolStatus::Error);
    assert_eq!(
        denial.content.text(),
        "Guardrail denied: tool 'bash' was blocked (oap.tool_not_allowed). Reason: tool 'bash' is denied. Choose an alternative approach."
    );
    assert_eq!(transcript_violations(sent), Vec::<String>::new());
}
