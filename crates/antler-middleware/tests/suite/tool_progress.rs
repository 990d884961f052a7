//! ToolProgressMiddleware: DeerFlow's expectations (spec 30 §ToolProgress) on the wrappers,
//! with ToolErrorHandling inside classifying results, and one run through the agent loop.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use antler_middleware::tool_error_handling::ToolErrorHandlingMiddleware;
use antler_middleware::tool_progress::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::markers::PROGRESS_HINT;
use antler_protocol::tool_meta::ToolMeta;
use antler_protocol::{Message, Object, ThreadState, ToolCall, ToolSpec};
use antler_runtime::*;
use async_trait::async_trait;
use serde_json::json;

use crate::common::{object_spec, run_ok};

/// A tool that answers from a queue (its last answer repeats), counting calls.
struct Scripted {
    spec: Arc<ToolSpec>,
    answers: Mutex<Vec<ToolOutput>>,
    calls: Mutex<usize>,
}

fn scripted(name: &str, answers: Vec<ToolOutput>) -> Arc<Scripted> {
    Arc::new(Scripted {
        spec: object_spec(name, ""),
        answers: Mutex::new(answers),
        calls: Mutex::new(0),
    })
}

#[async_trait]
impl Tool for Scripted {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
    async fn call(&self, _: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        *self.calls.lock().unwrap() += 1;
        let mut a = self.answers.lock().unwrap();
        Ok(if a.len() > 1 {
            a.remove(0)
        } else {
            a[0].clone()
        })
    }
}

fn config() -> ToolProgressConfig {
    ToolProgressConfig {
        enabled: true,
        ..Default::default()
    }
}

struct Rig {
    progress: Arc<ToolProgressMiddleware>,
    chain: Chain,
}

fn rig(cfg: ToolProgressConfig) -> Rig {
    let progress = Arc::new(ToolProgressMiddleware::new(cfg));
    let chain = Chain::new(vec![
        progress.clone(),
        Arc::new(ToolErrorHandlingMiddleware::new().with_result_meta(true)),
    ])
    .unwrap();
    Rig { progress, chain }
}

/// A rig over a tool named `name` that always answers `answer`, called `warm_up` times in
/// run `r1` of `thread` (then in phase `before`) and once more (then in phase `after`).
async fn escalation(
    (name, answer): (&str, ToolOutput),
    thread: &str,
    warm_up: usize,
    (before, after): (Phase, Phase),
) -> (Rig, Arc<Scripted>, Arc<RunContext>) {
    let r = rig(config());
    let tool = scripted(name, vec![answer]);
    let run = run_ctx(thread, "r1");
    r.call_times(&tool, &run, warm_up).await;
    assert_eq!(r.progress.phase(thread, name), Some(before));
    r.call(&tool, &run).await;
    assert_eq!(r.progress.phase(thread, name), Some(after));
    (r, tool, run)
}

impl Rig {
    /// `n` calls of `tool`, answers dropped.
    async fn call_times(&self, tool: &Arc<Scripted>, run: &Arc<RunContext>, n: usize) {
        for _ in 0..n {
            self.call(tool, run).await;
        }
    }

    async fn call(
        &self,
        tool: &Arc<Scripted>,
        run: &Arc<RunContext>,
    ) -> antler_protocol::ToolMessage {
        let t: Arc<dyn Tool> = tool.clone();
        let req = ToolCallRequest {
            call: ToolCall::new("c", tool.spec.name.clone(), Object::new()),
            tool: Some(t),
            state: Arc::new(ThreadState::default()),
            run: run.clone(),
            tool_names: Arc::from(vec![tool.spec.name.clone()]),
        };
        match self.chain.call_tool(req).await.unwrap() {
            ToolOutcome::Message(m) => m,
            ToolOutcome::Command(_) => panic!("unexpected command"),
        }
    }
}

fn run_ctx(thread: &str, run: &str) -> Arc<RunContext> {
    Arc::new(RunContext::new(thread, run, Arc::new(NullSink)))
}

fn words(s: &str) -> HashSet<String> {
    word_set(s)
}

#[test]
fn word_sets_and_near_duplicates() {
    assert_eq!(
        words("The cat, THE dog; an ox_1 to"),
        ["the", "cat", "dog", "ox_1"].map(String::from).into()
    );
    let a = words("alpha beta gamma delta epsilon zeta theta iota kappa lambda");
    let mut b = a.clone();
    assert!(is_near_duplicate(&b, std::slice::from_ref(&a), 0.8, 10));
    // 9 of 11 shared: Jaccard 0.818 ≥ 0.8; 8 of 12: 0.667 < 0.8.
    b.insert("omicron".into());
    assert!(is_near_duplicate(&b, std::slice::from_ref(&a), 0.8, 10));
    b.insert("sigma".into());
    b.remove("alpha");
    assert!(!is_near_duplicate(&b, std::slice::from_ref(&a), 0.8, 10));
    // Too short to compare.
    let short = words("one two three");
    assert!(!is_near_duplicate(
        &short,
        std::slice::from_ref(&short),
        0.8,
        10
    ));
}

#[tokio::test]
async fn repeated_no_results_warn_and_queue_a_hint_but_never_block() {
    let (r, tool, run) = escalation(
        (
            "web_search",
            ToolOutput::text("No results found for the query"),
        ),
        "t1",
        2,
        (Phase::Active, Phase::Warned),
    )
    .await;
    let hints = r.progress.pending_hints("t1", "r1");
    assert_eq!(hints.len(), 1);
    assert!(
        hints[0].starts_with("[PROGRESS HINT] The tool returned incomplete results"),
        "{hints:?}"
    );
    // Recoverable problems stay warned and keep re-hinting, capped at three.
    r.call_times(&tool, &run, 5).await;
    assert_eq!(r.progress.phase("t1", "web_search"), Some(Phase::Warned));
    assert_eq!(r.progress.pending_hints("t1", "r1").len(), 3);
    assert_eq!(*tool.calls.lock().unwrap(), 8);
}

#[tokio::test]
async fn unrecoverable_errors_escalate_to_a_block_that_skips_the_tool() {
    let (r, tool, run) = escalation(
        (
            "web_fetch",
            ToolOutput::error("Error: connection timed out"),
        ),
        "t2",
        4,
        (Phase::Warned, Phase::Blocked),
    )
    .await;
    let m = r.call(&tool, &run).await;
    assert_eq!(
        *tool.calls.lock().unwrap(),
        5,
        "a blocked tool is not called"
    );
    assert_eq!(
        m.content.text(),
        "[TOOL_BLOCKED] Repeated transient failures — take another approach."
    );
    let meta = ToolMeta::of(&m).unwrap();
    assert_eq!(
        meta.error_type.as_deref(),
        Some("blocked_by_progress_guard")
    );
    assert_eq!(meta.source, "progress_middleware");
}

#[tokio::test]
async fn auth_failures_block_at_once_and_a_good_result_resets_other_tools_independently() {
    let r = rig(config());
    let auth = scripted("a", vec![ToolOutput::error("Error: 401 Unauthorized")]);
    let run = run_ctx("t3", "r1");
    r.call(&auth, &run).await;
    assert_eq!(r.progress.phase("t3", "a"), Some(Phase::Blocked));
    let flaky = scripted(
        "b",
        vec![
            ToolOutput::error("Error: File not found: x"),
            ToolOutput::error("Error: File not found: x"),
            ToolOutput::error("Error: File not found: x"),
            ToolOutput::text("finally some content"),
        ],
    );
    r.call_times(&flaky, &run, 3).await;
    assert_eq!(r.progress.phase("t3", "b"), Some(Phase::Warned));
    r.call(&flaky, &run).await;
    assert_eq!(r.progress.phase("t3", "b"), Some(Phase::Active));
    assert_eq!(r.progress.phase("t3", "a"), Some(Phase::Blocked));
}

#[tokio::test]
async fn near_duplicate_successes_count_as_problems_and_different_content_does_not() {
    let r = rig(config());
    let page = "rust ownership borrowing lifetimes traits generics macros cargo crates modules";
    let same = scripted("web_fetch", vec![ToolOutput::text(page)]);
    let run = run_ctx("t4", "r1");
    r.call_times(&same, &run, 4).await;
    assert_eq!(r.progress.phase("t4", "web_fetch"), Some(Phase::Warned));
    assert!(r.progress.pending_hints("t4", "r1")[0].contains("same results"));
    let varied = scripted(
        "web_search",
        (0..5)
            .map(|i| {
                ToolOutput::text(format!(
                    "{page} unique{i} other{i} more{i} extra{i} words{i} here{i} there{i} again{i}"
                ))
            })
            .collect(),
    );
    r.call_times(&varied, &run, 5).await;
    assert_eq!(r.progress.phase("t4", "web_search"), Some(Phase::Active));
}

#[tokio::test]
async fn exempt_tools_are_not_tracked_and_an_empty_list_clears_exemptions() {
    let r = rig(config());
    let todo = scripted("write_todos", vec![ToolOutput::error("Error: 401")]);
    let run = run_ctx("t5", "r1");
    r.call(&todo, &run).await;
    assert_eq!(r.progress.phase("t5", "write_todos"), None);
    assert_eq!(r.progress.tracked_threads(), 0, "no phantom entries");
    let r = rig(ToolProgressConfig {
        exempt_tools: Vec::new(),
        ..config()
    });
    r.call(&todo, &run).await;
    assert_eq!(r.progress.phase("t5", "write_todos"), Some(Phase::Blocked));
}

#[tokio::test]
async fn before_agent_resets_the_thread_and_drops_other_runs_hints() {
    let r = rig(config());
    let tool = scripted("web_search", vec![ToolOutput::error("Error: 401")]);
    let nores = scripted("grep", vec![ToolOutput::text("No results found")]);
    let old = run_ctx("t6", "r-old");
    r.call(&tool, &old).await;
    r.call_times(&nores, &old, 3).await;
    assert_eq!(r.progress.pending_hints("t6", "r-old").len(), 1);
    let new = run_ctx("t6", "r-new");
    r.progress
        .before_agent(&ThreadState::default(), &new)
        .await
        .unwrap();
    assert!(r.progress.pending_hints("t6", "r-old").is_empty());
    assert_eq!(r.progress.phase("t6", "web_search"), Some(Phase::Active));
    assert_eq!(r.progress.phase("t6", "grep"), Some(Phase::Active));
}

#[tokio::test]
async fn the_lru_evicts_the_oldest_thread_with_its_hints() {
    let r = rig(ToolProgressConfig {
        max_tracked_threads: 2,
        ..config()
    });
    let nores = scripted("grep", vec![ToolOutput::text("No results found")]);
    let a = run_ctx("ta", "r");
    r.call_times(&nores, &a, 3).await;
    r.call(&nores, &run_ctx("tb", "r")).await;
    r.call(&nores, &run_ctx("tc", "r")).await;
    assert_eq!(r.progress.tracked_threads(), 2);
    assert_eq!(r.progress.phase("ta", "grep"), None);
    assert!(r.progress.pending_hints("ta", "r").is_empty());
}

#[tokio::test]
async fn missing_meta_is_passed_through_untracked() {
    // Without ToolErrorHandling inside, results carry no meta.
    let progress = Arc::new(ToolProgressMiddleware::new(config()));
    let chain = Chain::new(vec![progress.clone()]).unwrap();
    let tool = scripted("grep", vec![ToolOutput::error("Error: 401")]);
    let t: Arc<dyn Tool> = tool.clone();
    let req = ToolCallRequest {
        call: ToolCall::new("c", "grep", Object::new()),
        tool: Some(t),
        state: Arc::new(ThreadState::default()),
        run: run_ctx("t7", "r"),
        tool_names: Arc::from(vec!["grep".to_owned()]),
    };
    chain.call_tool(req).await.unwrap();
    assert_eq!(progress.phase("t7", "grep"), None);
}

#[tokio::test]
async fn hints_reach_the_next_model_call_once_deduplicated_and_not_when_disabled() {
    for inject in [true, false] {
        let model = Arc::new(ScriptedModel::new([
            ScriptedReply::tool_calls(
                (0..3).map(|i| (format!("c{i}"), "grep".to_owned(), json!({}))),
            ),
            ScriptedReply::text("giving up"),
        ]));
        let tool = scripted("grep", vec![ToolOutput::text("No results found")]);
        let progress = ToolProgressMiddleware::new(ToolProgressConfig {
            inject_assessment: inject,
            ..config()
        });
        let agent = Agent::new(model.clone())
            .with_tools(ToolRegistry::new().with(tool))
            .with_chain(
                Chain::new(vec![
                    Arc::new(progress),
                    Arc::new(ToolErrorHandlingMiddleware::new().with_result_meta(true)),
                ])
                .unwrap(),
            );
        let out = run_ok(&agent, "find", run_ctx("t8", "r")).await;
        let second = &model.requests()[1].messages;
        let hints: Vec<&Message> = second
            .iter()
            .filter(|m| matches!(m, Message::Human(h) if h.name.as_deref() == Some(PROGRESS_HINT)))
            .collect();
        if inject {
            assert_eq!(hints.len(), 1);
            assert!(hints[0].text().starts_with("[PROGRESS HINT]"));
            // Request-only: never persisted.
            assert!(out
                .state
                .messages
                .iter()
                .all(|m| m.text() != hints[0].text()));
        } else {
            assert!(hints.is_empty());
        }
    }
}
