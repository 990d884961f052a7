//! What is kept out of the summarized part: dynamic-context reminders, the current request
//! (spec 40 §1.5, §1.11) and recently loaded skill files (seeds; spec 60 §16).

use std::sync::{Arc, Mutex};

use antler_middleware::summarization::*;
use antler_models::ScriptedReply;
use antler_protocol::Message;
use antler_runtime::Middleware;
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

/// Summarize `msgs` (trigger: their count; keep `keep` messages); the written messages after the
/// remove-all marker, and what the hook saw as summarized.
async fn compact(
    msgs: Vec<Message>,
    keep: usize,
    tweak: impl FnOnce(&mut SummarizationConfig),
) -> (Vec<Message>, Vec<Message>) {
    compact_in(DEFAULT_SKILLS_CONTAINER_PATH, msgs, keep, tweak).await
}

/// [`compact`] with skills mounted at `skills_root`.
async fn compact_in(
    skills_root: &str,
    msgs: Vec<Message>,
    keep: usize,
    tweak: impl FnOnce(&mut SummarizationConfig),
) -> (Vec<Message>, Vec<Message>) {
    let log: HookLog = Arc::new(Mutex::new(Vec::new()));
    let mut s = settings(
        vec![ContextSize::Messages(msgs.len())],
        ContextSize::Messages(keep),
    );
    tweak(&mut s);
    let mw = middleware(
        s,
        model("run", vec![ScriptedReply::text("summary")]),
        None,
        vec![Recorder::new("h", &log)],
    )
    .with_skills_container_path(skills_root);
    let out = mw.before_model(&state(msgs), &run_ctx("t")).await.unwrap();
    let w = written(&out);
    if w.is_empty() {
        return (Vec::new(), Vec::new());
    }
    assert!(is_remove_all(&w[0]));
    assert!(is_summary_message(&w[1]));
    assert_paired(&w[1..]);
    let summarized = log.lock().unwrap()[0].1.messages.clone();
    (w[1..].to_vec(), summarized)
}

/// `msgs[1..]` ids (after the summary).
fn kept(w: &[Message]) -> Vec<String> {
    ids(&w[1..])
}

#[tokio::test]
async fn a_reminder_in_the_summarized_part_is_kept_first() {
    let msgs = vec![
        date_reminder("r1"),
        human("h1", "q1"),
        ai("a1", "x1"),
        human("h2", "q2"),
        ai("a2", "x2"),
        human("h3", "q3"),
    ];
    let (w, summarized) = compact(msgs, 2, |_| {}).await;
    assert_eq!(kept(&w), ["r1", "a2", "h3"]);
    assert_eq!(ids(&summarized), ["h1", "a1", "h2"]);
    // The reminder keeps its date (DynamicContext will see "already injected today").
    assert_eq!(
        w[1].additional_kwargs()["reminder_date"],
        json!("2026-05-08, Friday")
    );
}

#[tokio::test]
async fn a_stale_user_copy_compresses_while_reminders_and_the_current_request_stay() {
    // Turn 1 was ID-swapped (reminder at ctx-1, memory and user copies appended); turn 2's
    // request u2 is the current one and falls in the summarized part.
    let msgs = vec![
        date_reminder("ctx-1"),
        memory_reminder("ctx-1__memory"),
        human("ctx-1__user", "old question"),
        ai("a1", "old answer"),
        human("u2", "current question"),
        ai_calls("a2", &[("c1", "bash", json!({"command": "ls"}))]),
        tool("t1", "c1", "files"),
        ai("a3", "working"),
    ];
    let (w, summarized) = compact(msgs, 2, |_| {}).await;
    let ids_kept = kept(&w);
    assert!(ids_kept.contains(&"ctx-1".to_owned()));
    assert!(ids_kept.contains(&"ctx-1__memory".to_owned()));
    assert!(ids_kept.contains(&"u2".to_owned()));
    assert!(!ids_kept.contains(&"ctx-1__user".to_owned()));
    assert!(ids(&summarized).contains(&"ctx-1__user".to_owned()));
    // keep 2 would start at t1: moved back to its call a2.
    assert_eq!(ids_kept, ["ctx-1", "ctx-1__memory", "u2", "a2", "t1", "a3"]);
    assert_eq!(ids(&summarized), ["ctx-1__user", "a1"]);

    // Without a memory message.
    let msgs = vec![
        date_reminder("ctx-1"),
        human("ctx-1__user", "old question"),
        ai("a1", "old answer"),
        human("u2", "current question"),
        ai("a2", "x"),
        ai("a3", "y"),
    ];
    let (w, summarized) = compact(msgs, 2, |_| {}).await;
    assert_eq!(kept(&w), ["ctx-1", "u2", "a2", "a3"]);
    assert_eq!(ids(&summarized), ["ctx-1__user", "a1"]);
}

#[tokio::test]
async fn a_first_turn_long_analysis_keeps_its_request_and_compresses_early_steps() {
    let mut msgs = vec![
        date_reminder("ctx-1"),
        human("ctx-1__user", "analyse the repository"),
    ];
    for i in 1..=5 {
        msgs.push(ai_calls(
            &format!("ai{i}"),
            &[(&format!("c{i}"), "bash", json!({}))],
        ));
        msgs.push(tool(&format!("t{i}"), &format!("c{i}"), "output"));
    }
    let (w, summarized) = compact(msgs, 4, |_| {}).await;
    assert_eq!(kept(&w), ["ctx-1", "ctx-1__user", "ai4", "t4", "ai5", "t5"]);
    assert_eq!(ids(&summarized), ["ai1", "t1", "ai2", "t2", "ai3", "t3"]);
}

#[tokio::test]
async fn only_flagged_reminders_are_rescued() {
    let mut flagged = human("standalone", "<memory>x</memory>");
    flagged
        .additional_kwargs_mut()
        .insert("dynamic_context_reminder".into(), json!(true));
    let mut false_flag = human("not-a-reminder", "y");
    false_flag
        .additional_kwargs_mut()
        .insert("dynamic_context_reminder".into(), json!("yes"));
    let msgs = vec![
        human("msg__x", "an id with a double underscore"),
        flagged,
        false_flag,
        ai("a1", "x"),
        human("h2", "now"),
        ai("a2", "y"),
    ];
    let (w, summarized) = compact(msgs, 1, |_| {}).await;
    assert_eq!(kept(&w), ["standalone", "h2", "a2"]);
    assert_eq!(ids(&summarized), ["msg__x", "not-a-reminder", "a1"]);
}

#[tokio::test]
async fn rescued_reminders_keep_their_chronological_order() {
    let msgs = vec![
        date_reminder("base1"),
        memory_reminder("base1__memory"),
        human("base1__user", "q1"),
        ai("a1", "x1"),
        date_reminder("base2"),
        memory_reminder("base2__memory"),
        human("base2__user", "q2"),
        ai("a2", "x2"),
        human("u3", "q3"),
        ai("a3", "x3"),
    ];
    let (w, summarized) = compact(msgs, 1, |_| {}).await;
    assert_eq!(
        kept(&w),
        [
            "base1",
            "base1__memory",
            "base2",
            "base2__memory",
            "u3",
            "a3"
        ]
    );
    assert_eq!(ids(&summarized), ["base1__user", "a1", "base2__user", "a2"]);
}

#[tokio::test]
async fn nothing_happens_when_the_rescue_empties_the_summarized_part() {
    let msgs = vec![date_reminder("r1"), human("h1", "q"), ai("a1", "x")];
    let (w, _) = compact(msgs.clone(), 1, |_| {}).await;
    assert!(w.is_empty());

    // An existing summary stays as it is.
    let old = Message::Human(antler_protocol::HumanMessage {
        content: format!("{SUMMARY_PREFIX}earlier").into(),
        name: Some("summary".into()),
        id: Some("old-summary".into()),
        ..Default::default()
    });
    let mut with_summary = vec![old];
    with_summary.extend(msgs);
    let (w, _) = compact(with_summary, 1, |_| {}).await;
    assert!(w.is_empty());
}

fn read_skill(ai_id: &str, call: &str, path: &str) -> Message {
    ai_calls(
        ai_id,
        &[(
            call,
            "read_file",
            json!({"description": "load skill", "path": path}),
        )],
    )
}

/// A skill load (call + result) for skill `name`, body of `len` characters.
fn skill_load(n: usize, name: &str, len: usize) -> Vec<Message> {
    let call = format!("s{n}");
    vec![
        read_skill(
            &format!("sa{n}"),
            &call,
            &format!("/mnt/skills/public/{name}/SKILL.md"),
        ),
        tool(&format!("st{n}"), &call, &"b".repeat(len)),
    ]
}

fn chat(n: usize) -> Vec<Message> {
    vec![human(&format!("h{n}"), "q"), ai(&format!("a{n}"), "x")]
}

#[tokio::test]
async fn recently_loaded_skill_files_are_kept_with_their_calls() {
    let mut msgs = chat(0);
    msgs.extend(skill_load(1, "pdf", 10));
    msgs.extend(chat(1));
    msgs.extend(chat(2));
    let (w, summarized) = compact(msgs, 2, |_| {}).await;
    assert_eq!(kept(&w), ["sa1", "st1", "h2", "a2"]);
    assert_eq!(ids(&summarized), ["h0", "a0", "h1", "a1"]);
    // The rescued AI message carries only the skill read, without text.
    let ai = w[1].as_ai().unwrap();
    assert_eq!(ai.tool_calls.len(), 1);
    assert_eq!(ai.content.text(), "");
}

#[tokio::test]
async fn a_mixed_call_is_split_between_rescue_and_summary() {
    let mut mixed = ai_calls(
        "mix",
        &[
            (
                "s1",
                "read_file",
                json!({"path": "/mnt/skills/public/pdf/SKILL.md"}),
            ),
            ("b1", "bash", json!({"command": "ls"})),
        ],
    );
    *mixed.content_mut() = "Let me look.".into();
    // The provider's raw mirror of the calls follows the split.
    if let Message::Ai(a) = &mut mixed {
        a.additional_kwargs.insert(
            "tool_calls".into(),
            json!([{"id": "s1", "type": "function"}, {"id": "b1", "type": "function"}]),
        );
    }
    let mut msgs = chat(0);
    msgs.push(mixed);
    msgs.push(tool("ts1", "s1", "skill body"));
    msgs.push(tool("tb1", "b1", "a.txt"));
    msgs.extend(chat(1));
    let (w, summarized) = compact(msgs, 2, |_| {}).await;
    assert_eq!(kept(&w), ["mix", "ts1", "h1", "a1"]);
    let rescued = w[1].as_ai().unwrap();
    assert_eq!(
        rescued
            .tool_calls
            .iter()
            .map(|c| c.id_str())
            .collect::<Vec<_>>(),
        ["s1"]
    );
    assert_eq!(
        rescued.additional_kwargs["tool_calls"],
        json!([{"id": "s1", "type": "function"}])
    );
    assert_eq!(ids(&summarized), ["h0", "a0", "mix", "tb1"]);
    let rest = summarized[2].as_ai().unwrap();
    assert_eq!(rest.content.text(), "Let me look.");
    assert_eq!(
        rest.tool_calls
            .iter()
            .map(|c| c.id_str())
            .collect::<Vec<_>>(),
        ["b1"]
    );
}

#[tokio::test]
async fn at_most_the_five_newest_skills_are_rescued() {
    let mut msgs = chat(0);
    for (i, name) in ["a", "b", "c", "d", "e", "f", "g"].iter().enumerate() {
        msgs.extend(skill_load(i, name, 10));
    }
    msgs.extend(chat(1));
    let (w, _) = compact(msgs.clone(), 2, |_| {}).await;
    assert_eq!(
        kept(&w),
        ["sa2", "st2", "sa3", "st3", "sa4", "st4", "sa5", "st5", "sa6", "st6", "h1", "a1"]
    );
    let (w, _) = compact(msgs, 2, |s| s.preserve_recent_skill_count = 2).await;
    assert_eq!(kept(&w), ["sa5", "st5", "sa6", "st6", "h1", "a1"]);
}

#[tokio::test]
async fn a_skill_read_twice_is_rescued_once() {
    let mut msgs = chat(0);
    msgs.extend(skill_load(1, "pdf", 10));
    msgs.extend(skill_load(2, "pdf", 10));
    msgs.extend(chat(1));
    let (w, summarized) = compact(msgs, 2, |_| {}).await;
    assert_eq!(kept(&w), ["sa2", "st2", "h1", "a1"]);
    assert!(ids(&summarized).contains(&"st1".to_owned()));
}

#[tokio::test]
async fn skill_token_budgets_apply_per_skill_and_in_total() {
    // Tokens are characters here: a result costs its body plus its call id ("sN").
    let mut msgs = chat(0);
    msgs.extend(skill_load(1, "a", 28)); // 30
    msgs.extend(skill_load(2, "b", 98)); // 100: over the per-skill limit
    msgs.extend(skill_load(3, "c", 38)); // 40
    msgs.extend(skill_load(4, "d", 28)); // 30
    msgs.extend(chat(1));
    let budgets = |s: &mut SummarizationConfig| {
        s.preserve_recent_skill_tokens_per_skill = 50;
        s.preserve_recent_skill_tokens = 80;
    };
    let (w, _) = compact(msgs, 2, budgets).await;
    // Newest first: d (30), c (40) → 70; a (30) would make 100 > 80; b is too big alone.
    assert_eq!(kept(&w), ["sa3", "st3", "sa4", "st4", "h1", "a1"]);
}

#[tokio::test]
async fn skill_rescue_can_be_turned_off_and_only_matches_skill_reads() {
    let mut msgs = chat(0);
    msgs.extend(skill_load(1, "pdf", 10));
    msgs.extend(chat(1));
    for off in [
        (|s: &mut SummarizationConfig| s.preserve_recent_skill_count = 0)
            as fn(&mut SummarizationConfig),
        |s| s.preserve_recent_skill_tokens = 0,
        |s| s.skill_file_read_tool_names.clear(),
    ] {
        let (w, _) = compact(msgs.clone(), 2, off).await;
        assert_eq!(kept(&w), ["h1", "a1"]);
    }
    // Skills mounted elsewhere: the /mnt/skills read is not a skill load.
    let (w, _) = compact_in("/opt/skills", msgs.clone(), 2, |_| {}).await;
    assert_eq!(kept(&w), ["h1", "a1"]);
    // Not under the skills root, or not a read tool.
    let mut other = chat(0);
    other.push(read_skill("ra", "r1", "/mnt/user-data/workspace/SKILL.md"));
    other.push(tool("rt", "r1", "x"));
    other.push(ai_calls(
        "ba",
        &[(
            "b1",
            "bash",
            json!({"path": "/mnt/skills/public/pdf/SKILL.md"}),
        )],
    ));
    other.push(tool("bt", "b1", "x"));
    other.push(read_skill("pa", "p1", "/mnt/skills-other/x.md"));
    other.push(tool("pt", "p1", "x"));
    other.extend(chat(1));
    let (w, _) = compact(other, 2, |_| {}).await;
    assert_eq!(kept(&w), ["h1", "a1"]);

    // A custom root and tool name; `file_path` is read too.
    let mut custom = chat(0);
    custom.push(ai_calls(
        "ca",
        &[("k1", "view", json!({"file_path": "/opt/skills/x/SKILL.md"}))],
    ));
    custom.push(tool("ct", "k1", "x"));
    custom.extend(chat(1));
    let (w, _) = compact_in("/opt/skills/", custom, 2, |s| {
        s.skill_file_read_tool_names = vec!["view".into()];
    })
    .await;
    assert_eq!(kept(&w), ["ca", "ct", "h1", "a1"]);
}
