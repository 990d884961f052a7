//! Control flow passes through error handlers (spec 20 §11): a clarification `Command` crosses
//! Guardrail and ToolErrorHandling untouched, LLMErrorHandling and DanglingToolCall sit in the
//! same chain, and the run still ends after the batch. Real tool failures are still converted.

use std::sync::{Arc, Mutex};

use antler_middleware::clarification::{clarification_message, ClarificationMiddleware, TOOL_NAME};
use antler_middleware::dangling_tool_call::DanglingToolCallMiddleware;
use antler_middleware::guardrail::{AllowlistProvider, GuardrailMiddleware, GuardrailsConfig};
use antler_middleware::hook::ToolResult;
use antler_middleware::llm_error_handling::{
    CircuitBreaker, LlmCallConfig, LlmErrorHandlingMiddleware, ManualClock,
};
use antler_middleware::middleware_identity;
use antler_middleware::tool_error_handling::ToolErrorHandlingMiddleware;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Message, StateUpdate, ToolStatus};
use antler_runtime::*;
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::common::*;
use crate::common::{first_tool, run_ok, FnTool};

/// Outermost tool wrapper: records what comes back out of the onion.
#[derive(Default)]
struct Probe(Mutex<Vec<ToolOutcome>>);

#[async_trait]
impl Middleware for Probe {
    middleware_identity!("Probe", HookSet::WRAP_TOOL);
    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let out = next.run(req).await;
        if let Ok(o) = &out {
            self.0.lock().unwrap().push(o.clone());
        }
        out
    }
}

/// DeerFlow's shared segment in order, then Clarification last.
fn chain(probe: Arc<Probe>) -> Chain {
    let clock = Arc::new(ManualClock::new());
    let breaker = Arc::new(CircuitBreaker::with_clock(
        Default::default(),
        clock.clone(),
    ));
    Chain::new(vec![
        probe,
        Arc::new(DanglingToolCallMiddleware::new()),
        Arc::new(
            LlmErrorHandlingMiddleware::new(LlmCallConfig::default(), breaker)
                .with_limiter(None)
                .with_clock(clock),
        ),
        Arc::new(
            GuardrailMiddleware::new(
                Arc::new(AllowlistProvider::new(None, Some(vec!["forbidden".into()]))),
                &GuardrailsConfig::default(),
            )
            .with_label("authorization"),
        ),
        Arc::new(GuardrailMiddleware::new(
            Arc::new(AllowlistProvider::new(None, None)),
            &GuardrailsConfig::default(),
        )),
        Arc::new(ToolErrorHandlingMiddleware::new()),
        Arc::new(ClarificationMiddleware::new()),
    ])
    .unwrap()
}

#[tokio::test]
async fn a_clarification_command_crosses_every_error_handler_untouched() {
    let args = json!({"question": "Which file?", "clarification_type": "missing_info"});
    let probe = Arc::new(Probe::default());
    let broken = Failing::new("broken");
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_calls([
            ("f1".to_owned(), "broken".to_owned(), json!({})),
            ("q1".to_owned(), TOOL_NAME.to_owned(), args.clone()),
        ]),
        ScriptedReply::text("must not be used"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(broken))
        .with_chain(chain(probe.clone()));
    let out = run_ok(
        &agent,
        "edit it",
        Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink))),
    )
    .await;
    assert_eq!(model.requests().len(), 1, "the clarification ended the run");

    let seen = probe.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // The failing tool was converted by ToolErrorHandling...
    let ToolOutcome::Message(failure) = &seen[0] else {
        panic!("a tool error becomes a message")
    };
    assert_eq!(failure.status, ToolStatus::Error);
    assert!(failure
        .content
        .text()
        .starts_with("Error: Tool 'broken' failed"));
    // ...while the clarification's Command came out exactly as Clarification built it.
    let expected = Command {
        update: StateUpdate::message(clarification_message("q1", args.as_object().unwrap())),
        goto: Some(Goto::End),
    };
    assert_eq!(seen[1], ToolOutcome::Command(expected));

    let msgs = out.state.messages.to_vec();
    assert_eq!(transcript_violations(&msgs), Vec::<String>::new());
    assert_eq!(msgs.last().unwrap().id(), Some("clarification:q1"));
}

#[tokio::test]
async fn a_guardrail_denial_stops_a_clarification_before_it_is_asked() {
    // The guardrails sit outside Clarification, so a denied ask_clarification never ends the
    // run: the model gets the denial and goes on.
    let probe = Arc::new(Probe::default());
    let provider = Arc::new(AllowlistProvider::new(None, Some(vec![TOOL_NAME.into()])));
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call(
            "q1",
            TOOL_NAME,
            json!({"question": "?", "clarification_type": "missing_info"}),
        ),
        ScriptedReply::text("fine, deciding myself"),
    ]));
    let agent = Agent::new(model.clone()).with_chain(
        Chain::new(vec![
            probe.clone() as Arc<dyn Middleware>,
            Arc::new(GuardrailMiddleware::new(
                provider,
                &GuardrailsConfig::default(),
            )),
            Arc::new(ClarificationMiddleware::new()),
        ])
        .unwrap(),
    );
    let out = agent
        .run(
            RunInput::message(Message::human("go")),
            Arc::new(RunContext::new("t1", "r1", Arc::new(NullSink))),
        )
        .await;
    assert_eq!(model.requests().len(), 2);
    assert_eq!(
        out.state.messages.last().unwrap().text(),
        "fine, deciding myself"
    );
    let denial = result_for(&model.requests()[1].messages, "q1")
        .unwrap()
        .clone();
    assert_eq!(denial.status, ToolStatus::Error);
    assert!(denial
        .content
        .text()
        .starts_with("Guardrail denied: tool 'ask_clarification'"));
}

#[tokio::test]
async fn a_failing_tool_becomes_an_error_message_and_the_run_continues() {
    let boom = FnTool::named("boom", |_, _| {
        Err(ToolError::Failed("disk on fire\nsecond line".into()))
    });
    let model = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call("c1", "boom", json!({})),
        ScriptedReply::text("recovered"),
    ]));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(boom))
        .with_chain(Chain::new(vec![Arc::new(ToolErrorHandlingMiddleware::new())]).unwrap());
    let out = run_ok(
        &agent,
        "go",
        Arc::new(RunContext::new("t", "r", Arc::new(NullSink))),
    )
    .await;
    let tm = first_tool(&out.state);
    assert_eq!(tm.status, ToolStatus::Error);
    assert_eq!(tm.name.as_deref(), Some("boom"));
    assert_eq!(
        tm.content.text(),
        "Error: Tool 'boom' failed with ToolException: disk on fire second line. Continue with available context, or choose an alternative tool."
    );
    assert_eq!(model.requests().len(), 2);
}
