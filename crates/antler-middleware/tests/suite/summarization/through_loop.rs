//! Summarization inside the agent loop: a long conversation, the stream, the checkpoints, and the
//! per-step cost of the trigger.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use antler_middleware::summarization::*;
use antler_models::tokens::TokenCounter;
use antler_models::{RecordedRequest, ScriptedModel, ScriptedReply};
use antler_protocol::{Object, StreamEvent, StreamModes, ToolSpec};
use antler_runtime::*;
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;
use crate::common::object_spec;

struct Echo(Arc<ToolSpec>);

impl Echo {
    fn new() -> Arc<Echo> {
        Arc::new(Echo(object_spec("echo", "echo")))
    }
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.0
    }
    async fn call(&self, args: Object, _: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!("echo {}", json!(args))))
    }
}

fn is_summary_request(r: &RecordedRequest) -> bool {
    r.tools.is_empty()
}

/// Answers agent requests with tool rounds, then text; summary requests with a numbered
/// summary. Turn `t` (from the user's text "question t …") makes `1 + t % 2` rounds of
/// `1 + t % 3` parallel calls, so cutoffs land on every kind of message.
fn conversational_model() -> Arc<ScriptedModel> {
    let n = Arc::new(AtomicUsize::new(0));
    // Rounds made per turn (the model's own memory: older rounds may be summarized away).
    let rounds: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let model = ScriptedModel::new([]).with_fallback(move |req| {
        let k = n.fetch_add(1, Ordering::SeqCst);
        if is_summary_request(req) {
            return ScriptedReply::text(format!("summary #{k}"));
        }
        let Some(user) = req.messages.iter().rposition(|m| m.is_real_user_message()) else {
            return ScriptedReply::text("no question");
        };
        let question = req.messages[user].text();
        let turn: usize = question
            .split_whitespace()
            .nth(1)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let mut rounds = rounds.lock().unwrap();
        let done = rounds.entry(question).or_insert(0);
        if *done > turn % 2 {
            return ScriptedReply::text(format!("answer {k}"));
        }
        *done += 1;
        ScriptedReply::tool_calls(
            (0..1 + turn % 3)
                .map(|i| (format!("call-{k}-{i}"), "echo".to_owned(), json!({"k": k}))),
        )
    });
    Arc::new(model.with_info(antler_models::ModelInfo {
        name: "main".into(),
        model: "gpt-4o-mini".into(),
        provider: "openai".into(),
        ..Default::default()
    }))
}

/// The conversational model and a real-token middleware over it triggering at `trigger` and
/// keeping `keep` messages.
fn conversing(
    trigger: ContextSize,
    keep: usize,
) -> (Arc<ScriptedModel>, DeerFlowSummarizationMiddleware) {
    let model = conversational_model();
    let mw = with_real_tokens(
        settings(vec![trigger], ContextSize::Messages(keep)),
        model.clone(),
    );
    (model, mw)
}

fn agent(
    model: Arc<ScriptedModel>,
    mw: DeerFlowSummarizationMiddleware,
    cp: Arc<MemoryCheckpointer>,
) -> Agent {
    Agent::new(model)
        .with_tools(ToolRegistry::new().with(Echo::new()))
        .with_chain(Chain::new(vec![Arc::new(mw)]).unwrap())
        .with_checkpointer(cp)
}

#[tokio::test]
async fn a_sixty_turn_conversation_stays_short_and_well_formed() {
    let (model, mw) = conversing(ContextSize::Messages(10), 4);
    let cp = Arc::new(MemoryCheckpointer::new());
    let agent = agent(model.clone(), mw, cp.clone());
    let mut last = None;
    for turn in 0..60 {
        let run = Arc::new(RunContext::new(
            "thread-60",
            format!("run-{turn}"),
            Arc::new(NullSink),
        ));
        let out = agent
            .run(
                RunInput::message(human(&format!("turn-{turn}"), &format!("question {turn}"))),
                run,
            )
            .await;
        assert_eq!(
            out.status,
            RunStatus::Success,
            "turn {turn}: {:?}",
            out.error.map(|e| e.to_string())
        );
        last = Some(out.state);
    }
    let state = last.unwrap();

    let requests = model.requests();
    let summaries: Vec<&RecordedRequest> =
        requests.iter().filter(|r| is_summary_request(r)).collect();
    let agent_requests: Vec<&RecordedRequest> =
        requests.iter().filter(|r| !is_summary_request(r)).collect();
    // 60 answers + 90 tool rounds.
    assert_eq!(agent_requests.len(), 150);
    assert!(summaries.len() >= 20, "only {} summaries", summaries.len());
    // Later summaries fold in the earlier one.
    assert!(prompt_of(summaries[1]).contains("<existing_summary>"));

    // No request ever had an orphaned tool result or an unanswered call, and none reached the
    // trigger (it is checked right before every model call).
    for r in &agent_requests {
        assert_paired(&r.messages);
        assert!(
            r.messages.len() < 10,
            "{} messages: {:?}",
            r.messages.len(),
            ids(&r.messages)
        );
    }

    // The final state: the summary first, then the recent messages of the last turn.
    let msgs = state.messages.to_vec();
    assert!(is_summary_message(&msgs[0]));
    assert!(msgs[0].is_hidden());
    assert_eq!(msgs.iter().filter(|m| is_summary_message(m)).count(), 1);
    assert!(msgs.len() <= 10, "{:?}", ids(&msgs));
    assert_paired(&msgs);
    assert_eq!(
        msgs.last().unwrap().text().split(' ').next(),
        Some("answer")
    );
    assert!(msgs.iter().any(|m| m.id() == Some("turn-59")));
    assert!(!msgs.iter().any(|m| m.id() == Some("turn-0")));

    // Nothing is lost: earlier checkpoints still hold the original messages.
    let metas = cp.list("thread-60", usize::MAX, None).await.unwrap();
    let mut found_first_turn = false;
    for meta in &metas {
        let c = cp
            .get("thread-60", &meta.checkpoint_id)
            .await
            .unwrap()
            .unwrap();
        if c.state.messages.by_id("turn-0").is_some() {
            assert_eq!(
                c.state.messages.by_id("turn-0").unwrap().text(),
                "question 0"
            );
            found_first_turn = true;
        }
    }
    assert!(found_first_turn);
    let latest = cp.latest("thread-60").await.unwrap().unwrap();
    assert_eq!(latest.state.messages.to_vec(), msgs);
}

#[tokio::test]
async fn the_stream_shows_the_compaction_on_the_before_model_node() {
    let (model, mw) = conversing(ContextSize::Messages(4), 2);
    let sink = Arc::new(CollectingSink::with_modes(StreamModes::ALL));
    let run = Arc::new(RunContext::new("t", "r", sink.clone()));
    let agent = Agent::new(model.clone())
        .with_tools(ToolRegistry::new().with(Echo::new()))
        .with_chain(Chain::new(vec![Arc::new(mw)]).unwrap());
    let mut initial = antler_protocol::ThreadState::default();
    initial
        .apply(antler_protocol::StateUpdate::messages(vec![
            human("h0", "q0"),
            ai("a0", "x0"),
            human("h1", "q1"),
        ]))
        .unwrap();
    let out = agent
        .run(
            RunInput {
                messages: vec![human("h2", "q2")],
                initial_state: Some(initial),
                ..Default::default()
            },
            run,
        )
        .await;
    assert_eq!(out.status, RunStatus::Success);
    let updates: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Updates { node, update }
                if node == "DeerFlowSummarizationMiddleware.before_model" && !update.is_empty() =>
            {
                Some(update)
            }
            _ => None,
        })
        .collect();
    assert!(!updates.is_empty());
    let first = updates[0].messages.clone().unwrap();
    assert!(is_remove_all(&first[0]));
    assert!(is_summary_message(&first[1]));
    // The summary call itself never reaches the stream as message chunks.
    for e in sink.events() {
        if let StreamEvent::Messages { message, .. } = e {
            let v = serde_json::to_value(match message {
                antler_protocol::StreamMessage::AiChunk(c) => serde_json::to_value(c).unwrap(),
                antler_protocol::StreamMessage::Tool(t) => serde_json::to_value(t).unwrap(),
            })
            .unwrap();
            assert!(!v.to_string().contains("summary #"), "{v}");
        }
    }
}

#[tokio::test]
async fn measuring_tokens_each_step_only_counts_new_messages() {
    let model = conversational_model();
    let texts = Arc::new(AtomicUsize::new(0));
    let t = texts.clone();
    let counter = TokenCounter::custom(move |s| {
        t.fetch_add(1, Ordering::SeqCst);
        s.len()
    });
    let mw = with_real_tokens(
        settings(
            vec![ContextSize::Tokens(u64::MAX)],
            ContextSize::Messages(4),
        ),
        model.clone(),
    )
    .with_token_counter(counter);
    let cp = Arc::new(MemoryCheckpointer::new());
    let agent = agent(model.clone(), mw, cp);
    for turn in 0..30 {
        let run = Arc::new(RunContext::new("t", format!("r{turn}"), Arc::new(NullSink)));
        let out = agent
            .run(
                RunInput::message(human(&format!("u{turn}"), &format!("question {turn}"))),
                run,
            )
            .await;
        assert_eq!(out.status, RunStatus::Success);
    }
    // 30 turns: 30 questions, 45 tool rounds making 90 calls, 90 results, 30 answers. Each
    // message is counted exactly once: its content, plus name and args per call, plus the
    // tool-call id of a result. Re-measuring the history would count hundreds per step. (The
    // last answer is never measured: no model call follows it.)
    let n = texts.load(Ordering::SeqCst);
    assert_eq!(n, 30 + (45 + 2 * 90) + 2 * 90 + 30 - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_share_one_middleware_without_mixing_threads() {
    let (model, mw) = conversing(ContextSize::Tokens(400), 4);
    let cp = Arc::new(MemoryCheckpointer::new());
    let agent = Arc::new(agent(model.clone(), mw, cp.clone()));
    let conversation = |thread: &'static str| {
        let agent = agent.clone();
        tokio::spawn(async move {
            for turn in 0..12 {
                let run = Arc::new(RunContext::new(
                    thread,
                    format!("{thread}-{turn}"),
                    Arc::new(NullSink),
                ));
                let text = format!("question {turn} about {thread}");
                let out = agent
                    .run(
                        RunInput::message(human(&format!("{thread}-{turn}"), &text)),
                        run,
                    )
                    .await;
                assert_eq!(out.status, RunStatus::Success);
            }
        })
    };
    let (a, b) = tokio::join!(conversation("alpha"), conversation("beta"));
    a.unwrap();
    b.unwrap();
    let requests = model.requests();
    let summaries: Vec<String> = requests
        .iter()
        .filter(|r| is_summary_request(r))
        .map(prompt_of)
        .collect();
    assert!(summaries.len() >= 4, "{}", summaries.len());
    for p in &summaries {
        // Each summary covers one thread only.
        assert_ne!(p.contains("about alpha"), p.contains("about beta"), "{p}");
    }
    for thread in ["alpha", "beta"] {
        let s = cp.latest(thread).await.unwrap().unwrap().state;
        let msgs = s.messages.to_vec();
        assert!(is_summary_message(&msgs[0]), "{thread}");
        assert_paired(&msgs);
        let other = if thread == "alpha" { "beta" } else { "alpha" };
        assert!(!msgs.iter().any(|m| m.text().contains(other)));
    }
}
