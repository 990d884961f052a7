//! Triggers, cutoff and keep policy (spec 40 §1.1, §1.3, §1.4, §1.12).

use std::sync::Arc;

use antler_middleware::summarization::*;
use antler_models::{ChatModel, ModelError, ScriptedReply};
use antler_protocol::Message;
use antler_protocol::UsageMetadata;
use antler_runtime::Middleware;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

/// `n` human/AI messages of ten characters each.
fn tens(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                human(&format!("m{i}"), "0123456789")
            } else {
                ai(&format!("m{i}"), "0123456789")
            }
        })
        .collect()
}

async fn fires(mw: &DeerFlowSummarizationMiddleware, msgs: Vec<Message>) -> bool {
    let out = mw.before_model(&state(msgs), &run_ctx("t")).await.unwrap();
    !update_is_empty(&out)
}

fn always_summarizes() -> std::sync::Arc<antler_models::ScriptedModel> {
    let m = antler_models::ScriptedModel::new([]).with_fallback(|_| ScriptedReply::text("sum"));
    std::sync::Arc::new(m.with_info(antler_models::ModelInfo {
        name: "run".into(),
        model: "gpt-4o".into(),
        provider: "openai".into(),
        ..Default::default()
    }))
}

/// A middleware with `trigger` that keeps the last two messages, summarizing with
/// [`always_summarizes`].
fn keeping_two(trigger: Vec<ContextSize>) -> DeerFlowSummarizationMiddleware {
    middleware(
        settings(trigger, ContextSize::Messages(2)),
        always_summarizes(),
        None,
        vec![],
    )
}

#[test]
fn defaults_are_deerflows() {
    let s = SummarizationConfig::default();
    assert!(!s.enabled);
    assert_eq!(s.model_name, None);
    assert!(s.trigger.is_empty());
    assert_eq!(s.keep, ContextSize::Messages(20));
    assert_eq!(s.trim_tokens_to_summarize, Some(4000));
    assert_eq!(s.summary_prompt, None);
    assert_eq!(
        s.skill_file_read_tool_names,
        ["read_file", "read", "view", "cat"]
    );
    assert_eq!(s.preserve_recent_skill_count, 5);
    assert_eq!(s.preserve_recent_skill_tokens, 25_000);
    assert_eq!(s.preserve_recent_skill_tokens_per_skill, 5_000);
    assert_eq!(DEFAULT_SKILLS_CONTAINER_PATH, "/mnt/skills");
    assert!(DEFAULT_SUMMARY_PROMPT.contains("{messages}"));
}

#[test]
fn settings_are_validated() {
    let build = |trigger: Vec<ContextSize>, keep: ContextSize, window: Option<u64>| {
        DeerFlowSummarizationMiddleware::new(
            settings(trigger, keep),
            always_summarizes() as Arc<dyn ChatModel>,
            None,
            window,
            vec![],
        )
        .err()
    };
    assert_eq!(
        build(
            vec![ContextSize::Fraction(0.8)],
            ContextSize::Messages(2),
            None
        ),
        Some(SummarizationConfigError::NoContextWindow {
            key: "trigger".into()
        })
    );
    assert_eq!(
        build(vec![], ContextSize::Fraction(0.3), None),
        Some(SummarizationConfigError::NoContextWindow { key: "keep".into() })
    );
    assert_eq!(
        build(
            vec![ContextSize::Messages(5), ContextSize::Fraction(1.5)],
            ContextSize::Messages(2),
            Some(1000)
        ),
        Some(SummarizationConfigError::BadFraction {
            key: "trigger[1]".into(),
            value: 1.5
        })
    );
    assert_eq!(
        build(
            vec![ContextSize::Fraction(0.0)],
            ContextSize::Messages(2),
            Some(1000)
        )
        .map(|e| e.to_string()),
        Some(
            "summarization.trigger: a fraction must be greater than 0 and at most 1, got 0".into()
        )
    );
    assert_eq!(
        build(vec![ContextSize::Tokens(0)], ContextSize::Messages(2), None),
        Some(SummarizationConfigError::NotPositive {
            key: "trigger".into()
        })
    );
    assert_eq!(
        build(vec![], ContextSize::Messages(0), None),
        Some(SummarizationConfigError::NotPositive { key: "keep".into() })
    );
    assert_eq!(
        build(
            vec![ContextSize::Fraction(1.0)],
            ContextSize::Fraction(0.5),
            Some(1000)
        ),
        None
    );
    let mut s = settings(vec![], ContextSize::Messages(2));
    s.summary_prompt = Some("Summarize please".into());
    assert_eq!(
        DeerFlowSummarizationMiddleware::new(s, always_summarizes(), None, None, vec![]).err(),
        Some(SummarizationConfigError::PromptWithoutPlaceholder)
    );
}

#[tokio::test]
async fn a_trigger_list_fires_when_any_clause_is_met() {
    let mw = keeping_two(vec![ContextSize::Tokens(10_000), ContextSize::Messages(5)]);
    assert!(!fires(&mw, tens(4)).await);
    assert!(fires(&mw, tens(5)).await);
    let mw = keeping_two(vec![ContextSize::Messages(100), ContextSize::Tokens(50)]);
    assert!(!fires(&mw, tens(4)).await);
    assert!(fires(&mw, tens(5)).await);
}

#[tokio::test]
async fn no_trigger_means_never_automatically_but_force_still_compacts() {
    let mw = keeping_two(vec![]);
    assert!(!fires(&mw, tens(200)).await);
    let c = mw
        .compact(
            &state(tens(6)),
            &run_ctx("t"),
            CompactOptions {
                force: true,
                keep: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&c.preserved), ["m4", "m5"]);
    assert_eq!(ids(&c.summarized), ["m0", "m1", "m2", "m3"]);
}

#[tokio::test]
async fn force_ignores_the_trigger_and_keeps_exactly_keep() {
    let mw = keeping_two(vec![ContextSize::Messages(100)]);
    let force = CompactOptions {
        force: true,
        keep: None,
    };
    let c = mw
        .compact(&state(tens(5)), &run_ctx("t"), force)
        .await
        .unwrap()
        .unwrap();
    // m4 is the latest user message and is kept anyway; exactly two kept.
    assert_eq!(ids(&c.preserved), ["m3", "m4"]);
    assert_eq!(c.summary, "sum");
    assert_eq!(c.total_tokens, 50);
    assert_eq!(c.removed_ids, ["m0", "m1", "m2"]);
    // A keep override for one call.
    let c = mw
        .compact(
            &state(tens(5)),
            &run_ctx("t"),
            CompactOptions {
                force: true,
                keep: Some(ContextSize::Messages(3)),
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&c.preserved), ["m2", "m3", "m4"]);

    // Nothing to compact: Ok(None); a generation failure: Err (distinct).
    let short = mw
        .compact(&state(tens(2)), &run_ctx("t"), force)
        .await
        .unwrap();
    assert!(short.is_none());
    let failing = middleware(
        settings(vec![], ContextSize::Messages(2)),
        model(
            "run",
            vec![ScriptedReply::Error(ModelError::Connect("down".into()))],
        ),
        None,
        vec![],
    );
    assert_eq!(
        failing
            .compact(&state(tens(5)), &run_ctx("t"), force)
            .await
            .unwrap_err(),
        SummaryGenerationError
    );
}

#[tokio::test]
async fn tokens_trigger_counts_the_history() {
    let mw = keeping_two(vec![ContextSize::Tokens(50)]);
    assert!(!fires(&mw, tens(4)).await);
    assert!(fires(&mw, tens(5)).await);
}

#[tokio::test]
async fn fraction_trigger_uses_the_context_window() {
    let mw = windowed(
        settings(vec![ContextSize::Fraction(0.05)], ContextSize::Messages(2)),
        always_summarizes(),
        1000,
    );
    assert!(!fires(&mw, tens(4)).await);
    assert!(fires(&mw, tens(5)).await);
}

fn ai_with_usage(id: &str, total: u64, provider: &str) -> Message {
    let mut m = antler_protocol::AiMessage {
        content: "0123456789".into(),
        id: Some(id.into()),
        usage_metadata: Some(UsageMetadata::new(total, 0)),
        ..Default::default()
    };
    m.response_metadata
        .insert("model_provider".into(), json!(provider));
    Message::Ai(m)
}

#[tokio::test]
async fn the_providers_own_count_triggers_when_it_is_the_same_provider() {
    let mw = middleware(
        settings(vec![ContextSize::Tokens(1000)], ContextSize::Messages(1)),
        always_summarizes(),
        None,
        vec![],
    );
    let with = |provider: &str| {
        vec![
            human("h1", "0123456789"),
            ai_with_usage("a1", 1500, provider),
            human("h2", "0123456789"),
        ]
    };
    // The estimate (30, ×1.25 at most) is far below; the provider says 1500.
    assert!(fires(&mw, with("openai")).await);
    assert!(!fires(&mw, with("anthropic")).await);
}

#[tokio::test]
async fn usage_scaling_lifts_the_estimate_by_at_most_a_quarter() {
    // Estimate 40 (4 × 10 chars); the provider counted 12 through the AI message (2 × 10 → ×1.2).
    let mw = middleware(
        settings(vec![ContextSize::Tokens(48)], ContextSize::Messages(1)),
        always_summarizes(),
        None,
        vec![],
    );
    let msgs = |usage: u64| {
        vec![
            human("h1", "0123456789"),
            ai_with_usage("a1", usage, "openai"),
            human("h2", "0123456789"),
            human("h3", "0123456789"),
        ]
    };
    assert!(fires(&mw, msgs(24)).await);
    assert!(!fires(&mw, msgs(23)).await);
}

#[tokio::test]
async fn a_deerflow_summary_text_counts_and_is_folded_in() {
    // Three short messages + a 120-char summary cross an 80-char trigger.
    let mw = middleware(
        settings(vec![ContextSize::Tokens(80)], ContextSize::Messages(1)),
        always_summarizes(),
        None,
        vec![],
    );
    let msgs = vec![
        human("h1", "aaaaa"),
        ai("a1", "bbbbb"),
        human("h2", "ccccc"),
    ];
    assert!(!fires(&mw, msgs.clone()).await);
    let mut s = state(msgs);
    s.summary_text = Some("s".repeat(120));
    let out = mw.before_model(&s, &run_ctx("t")).await.unwrap();
    // Folded into the summary message, so the channel is cleared.
    assert_eq!(out.update.as_ref().unwrap().summary_text, Some(None));
    let after = applied(s, &out);
    assert_eq!(after.summary_text, None);
    assert_eq!(
        after
            .messages
            .iter()
            .filter(|m| is_summary_message(m))
            .count(),
        1
    );
}

#[tokio::test]
async fn the_previous_summary_message_counts_and_is_replaced() {
    let run = always_summarizes();
    let mw = middleware(
        settings(vec![ContextSize::Messages(5)], ContextSize::Messages(2)),
        run.clone(),
        None,
        vec![],
    );
    let first = mw
        .before_model(&state(tens(5)), &run_ctx("t"))
        .await
        .unwrap();
    let s = applied(state(tens(5)), &first);
    assert_eq!(ids(&s.messages.to_vec()[1..]), ["m3", "m4"]);
    let old_summary = s.messages.get(0).unwrap().clone();
    assert!(is_summary_message(&old_summary));

    // Four messages + the summary reach the trigger of five.
    let mut msgs = s.messages.to_vec();
    msgs.push(ai("m5", "0123456789"));
    msgs.push(human("m6", "0123456789"));
    let s = state(msgs);
    let second = mw.before_model(&s, &run_ctx("t")).await.unwrap();
    let after = applied(s, &second);
    let summaries: Vec<_> = after
        .messages
        .iter()
        .filter(|m| is_summary_message(m))
        .collect();
    assert_eq!(summaries.len(), 1);
    assert_ne!(summaries[0].id(), old_summary.id());
    assert_eq!(ids(&after.messages.to_vec()[1..]), ["m5", "m6"]);
    // The old summary went into the prompt as the existing summary, not as a transcript line.
    let prompt = prompt_of(&run.requests()[1]);
    assert!(
        prompt.contains("<existing_summary>\nsum\n</existing_summary>"),
        "{prompt}"
    );
    assert!(!prompt.contains("Here is a summary"), "{prompt}");
}

#[tokio::test]
async fn the_cutoff_never_separates_tool_calls_from_their_results() {
    let msgs = vec![
        human("h1", "q1"),
        ai_calls("a1", &[("c1", "bash", json!({}))]),
        tool("t1", "c1", "r1"),
        human("h2", "q2"),
        ai_calls(
            "a2",
            &[("c2", "bash", json!({})), ("c3", "bash", json!({}))],
        ),
        tool("t2", "c2", "r2"),
        tool("t3", "c3", "r3"),
        ai("a3", "done"),
    ];
    // keep 3 would start at t2: the cutoff moves back to a2.
    let mw = middleware(
        settings(vec![ContextSize::Messages(8)], ContextSize::Messages(3)),
        always_summarizes(),
        None,
        vec![],
    );
    let out = mw
        .before_model(&state(msgs.clone()), &run_ctx("t"))
        .await
        .unwrap();
    let w = written(&out);
    assert_eq!(ids(&w[2..]), ["h2", "a2", "t2", "t3", "a3"]);
    assert_paired(&w[1..]);

    // Results without their call anywhere: the cutoff moves past them instead.
    let msgs = vec![
        human("h1", "q1"),
        tool("tx", "x", "rx"),
        tool("ty", "y", "ry"),
        human("h2", "q2"),
        ai("a2", "ok"),
    ];
    let mw = middleware(
        settings(vec![ContextSize::Messages(5)], ContextSize::Messages(4)),
        always_summarizes(),
        None,
        vec![],
    );
    let c = mw
        .compact(
            &state(msgs),
            &run_ctx("t"),
            CompactOptions {
                force: true,
                keep: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&c.summarized), ["h1", "tx", "ty"]);
    assert_eq!(ids(&c.preserved), ["h2", "a2"]);
}

#[tokio::test]
async fn keep_by_tokens_keeps_the_longest_tail_within_the_budget() {
    let run = |keep| {
        let mw = middleware(
            settings(vec![ContextSize::Messages(5)], keep),
            always_summarizes(),
            None,
            vec![],
        );
        async move {
            let out = mw
                .before_model(&state(tens(5)), &run_ctx("t"))
                .await
                .unwrap();
            let w = written(&out);
            if w.is_empty() {
                None
            } else {
                Some(ids(&w[2..]))
            }
        }
    };
    assert_eq!(
        run(ContextSize::Tokens(25)).await,
        Some(vec!["m3".into(), "m4".into()])
    );
    assert_eq!(
        run(ContextSize::Tokens(30)).await,
        Some(vec!["m2".into(), "m3".into(), "m4".into()])
    );
    // Even the last message alone is over: keep the last one.
    assert_eq!(run(ContextSize::Tokens(5)).await, Some(vec!["m4".into()]));
    // Everything fits: nothing to do.
    assert_eq!(run(ContextSize::Tokens(50)).await, None);
}

#[tokio::test]
async fn keep_by_fraction_uses_the_context_window() {
    let mw = windowed(
        settings(vec![ContextSize::Messages(5)], ContextSize::Fraction(0.25)),
        always_summarizes(),
        100,
    );
    let out = mw
        .before_model(&state(tens(5)), &run_ctx("t"))
        .await
        .unwrap();
    assert_eq!(ids(&written(&out)[2..]), ["m3", "m4"]);
}

#[tokio::test]
async fn a_custom_prompt_receives_the_messages() {
    let run = always_summarizes();
    let mut s = settings(vec![ContextSize::Messages(3)], ContextSize::Messages(1));
    s.summary_prompt = Some("Squash this:\n{messages}\n\n".into());
    let mw = DeerFlowSummarizationMiddleware::new(s, run.clone(), None, None, vec![]).unwrap();
    mw.before_model(&state(tens(3)), &run_ctx("t"))
        .await
        .unwrap();
    let prompt = prompt_of(&run.requests()[0]);
    assert_eq!(
        prompt,
        "Squash this:\n<new_messages>\nHuman: 0123456789\nAI: 0123456789\n</new_messages>"
    );
}
