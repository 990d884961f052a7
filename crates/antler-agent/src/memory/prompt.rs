//! What the memory model is asked, and how memory is shown to the lead agent.
//!
//! Update side: a static system prompt (byte-identical every call, so provider prefix caches
//! hold) that asks for DeerMem's JSON change set, and a user part with the current memory, the
//! conversation (`User:` / `Assistant:` paragraphs, long turns cut in the middle, `< > &`
//! escaped so a turn cannot close the block it sits in) and one hint per detected signal.
//!
//! Read side: [`format_injection`] renders summaries and facts within `max_injection_tokens`
//! (spec 40 §4.8): guaranteed categories (corrections by default) get their own budget and lead
//! the facts block; other facts follow by confidence; selection stops at the first fact that does
//! not fit so a short low-ranked fact never jumps a long high-ranked one; on overflow only the
//! summaries are cut.

use std::collections::BTreeSet;

use antler_middleware::memory::preprocess::{message_text, strip_upload_blocks, Signal};
use antler_models::TokenCounter;
use antler_protocol::Message;
use serde_json::{json, Map, Value};

use super::document::{Fact, Profile, Section};

/// The system part of every memory update call.
pub const UPDATE_SYSTEM_PROMPT: &str = r#"You keep the long-term memory of one user for an AI assistant. You receive the current memory and a new conversation, and you answer with the changes to make: one JSON object, nothing else.

First reflect on the conversation: did the assistant make mistakes or need retries, and what fixed them? Did the user correct the assistant's understanding, direction or output? Did constraints that only hold inside one project come up?

Label every summary and fact you propose:
- scope: "user" when it is true of the user in general and would help in an unrelated future conversation; "thread" when it only concerns this conversation or task; "project" when it only holds inside one project or repository.
- durability: "durable" when it will stay true; "temporary" when it is current, short-lived or one-off.
- authority: "descriptive" when it describes the user; "transactional" when it grants a permission or instructs an action (editing, deleting, pushing, publishing, ...). Transactional content is never stored, even when it is phrased as a standing policy.
Only facts labelled user + durable + descriptive and summaries labelled user + descriptive are kept; everything else is discarded. When unsure, prefer thread or project, and temporary.

Summaries. Rewrite a section (shouldUpdate: true) only when the conversation adds something meaningful; keep names, versions and numbers exact:
- user.workContext: role, organisation, main projects and technologies (2-3 sentences).
- user.personalContext: languages, communication preferences, interests (1-2 sentences).
- user.topOfMind: the 3-5 things the user is currently busy with, dropping finished ones (one detailed paragraph).
- history.recentMonths: what the user worked on over the last months (one or two paragraphs).
- history.earlierContext: older patterns that still matter (3-5 sentences).
- history.longTermBackground: lasting background, expertise and working style (2-4 sentences).

Facts are specific, self-contained statements. Categories: preference (tools, styles, approaches liked or disliked), knowledge (expertise), context (background such as job, projects, location, languages), behavior (working and communication habits), goal (stated objectives), correction (a mistake of the assistant or a correction by the user, with the right approach; describe the mistake in "sourceError"). Confidence: 0.9-1.0 for what the user stated, 0.7-0.8 for what is strongly implied, 0.5-0.6 for inferences (rarely). An explicit correction gets at least 0.95. "expected_valid_days" (optional) estimates how long the fact stays true: up to 14 for today's issues, 15-60 for current experiments, 60-180 for the current role and stack, 180-365 for established patterns, more for lasting traits. Do not record tasks of this conversation, the state of files or commits, or one-time permissions. Never record that files were uploaded: uploads belong to one conversation only.

Existing facts carry ids in the current memory. Put an id in factsToReinforce only when the conversation explicitly confirms that fact again (not because it was shown to you). Put an id in factsToRemove only when the user explicitly contradicts or withdraws it for themselves in general, always with scope and reason, and with replacementFactIndex (the zero-based index in newFacts) when a new fact replaces it. Facts marked [MANUAL] were written by the user: change them only on an explicit, unambiguous correction.

The user part may end with a "Staleness review" or a "Memory consolidation" section; answer those in "staleFactsToRemove" / "staleFactsToExtend" and "factsToConsolidate" as they explain, and leave these lists empty when there is no such section.

Answer with exactly this shape (summaries you do not change: shouldUpdate false):
{
  "user": {
    "workContext": {"summary": "...", "shouldUpdate": true, "scope": "user", "authority": "descriptive"},
    "personalContext": {"summary": "...", "shouldUpdate": false, "scope": "user", "authority": "descriptive"},
    "topOfMind": {"summary": "...", "shouldUpdate": false, "scope": "user", "authority": "descriptive"}
  },
  "history": {
    "recentMonths": {"summary": "...", "shouldUpdate": false, "scope": "user", "authority": "descriptive"},
    "earlierContext": {"summary": "...", "shouldUpdate": false, "scope": "user", "authority": "descriptive"},
    "longTermBackground": {"summary": "...", "shouldUpdate": false, "scope": "user", "authority": "descriptive"}
  },
  "newFacts": [
    {"content": "...", "category": "preference", "confidence": 0.9, "expected_valid_days": 180, "scope": "user", "durability": "durable", "authority": "descriptive"}
  ],
  "factsToReinforce": [{"id": "fact_...", "scope": "user", "reason": "..."}],
  "factsToRemove": [{"id": "fact_...", "scope": "user", "reason": "...", "replacementFactIndex": 0}],
  "staleFactsToRemove": [{"id": "fact_...", "reason": "..."}],
  "staleFactsToExtend": [{"id": "fact_...", "extend_by_days": 365, "reason": "..."}],
  "factsToConsolidate": [{"sourceIds": ["fact_...", "fact_..."], "consolidated": {"content": "...", "category": "preference", "confidence": 0.9, "scope": "user", "durability": "durable", "authority": "descriptive"}}]
}"#;

/// One line per detected signal, appended to the user part.
fn signal_hint(signal: Signal) -> &'static str {
    match signal {
        Signal::Correction => {
            "IMPORTANT: the user corrected the assistant in this conversation. Store the correction (confidence 0.95 or more) only if it is a lasting, user-level way of working that applies to unrelated tasks; a correction of this task's facts, files or constraints is thread- or project-scoped."
        }
        Signal::Reinforcement => {
            "IMPORTANT: the user explicitly approved the assistant's approach. Store the approved style or approach only if it is a lasting user-level pattern; approval of this particular result is thread-scoped."
        }
        Signal::Preference => {
            "IMPORTANT: the user stated a preference. Store it with high confidence only if it is a lasting, user-level preference rather than a choice for this task."
        }
        Signal::Identity => {
            "IMPORTANT: the user said something about who they are (role, profession, background). Store it if it holds beyond this task."
        }
        Signal::Goal => {
            "IMPORTANT: the user stated a goal. Store only a lasting, user-level goal, not the objective of this task, sprint or thread."
        }
        Signal::Decision => {
            "IMPORTANT: the user made a decision. Store only a lasting, user-level decision or working pattern, not a choice made for this task or file."
        }
    }
}

/// Escape `<`, `>` and `&` (text position: quotes stay as they are).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
    out
}

fn escape_value(v: &mut Value) {
    match v {
        Value::String(s) => *s = escape(s),
        Value::Array(a) => a.iter_mut().for_each(escape_value),
        Value::Object(o) => o.values_mut().for_each(escape_value),
        _ => {}
    }
}

/// The conversation as the memory model reads it.
pub fn format_conversation(messages: &[std::sync::Arc<Message>]) -> String {
    let mut parts = Vec::new();
    for m in messages {
        let (who, mut text) = match &**m {
            Message::Human(_) => (
                "User",
                strip_upload_blocks(&message_text(m)).trim().to_owned(),
            ),
            Message::Ai(_) => ("Assistant", message_text(m)),
            _ => continue,
        };
        if who == "User" && text.is_empty() {
            continue;
        }
        let n = text.chars().count();
        if n > 1000 {
            let head: String = text.chars().take(500).collect();
            let tail: String = text.chars().skip(n - 500).collect();
            text = format!("{head}\n...[truncated]...\n{tail}");
        }
        parts.push(format!("{who}: {}", escape(&text)));
    }
    parts.join("\n\n")
}

/// The current memory as shown to the model: summaries and facts, strings escaped, manual facts
/// marked.
pub fn current_memory_json(profile: &Profile, facts: &[Fact]) -> String {
    let facts: Vec<Value> = facts
        .iter()
        .map(|f| {
            let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
            if f.is_manual() {
                if let Some(Value::String(c)) = v.get_mut("content") {
                    *c = format!("[MANUAL] {c}");
                }
            }
            v
        })
        .collect();
    let mut doc = json!({"user": profile.user, "history": profile.history, "facts": facts});
    escape_value(&mut doc);
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".to_owned())
}

/// The user part of an update call.
/// `staleness` and `consolidation` are the optional review sections (empty when there is
/// nothing to review; see [`super::review`]).
pub fn update_user_prompt(
    current_memory: &str,
    conversation: &str,
    signals: &BTreeSet<Signal>,
    has_manual: bool,
    staleness: &str,
    consolidation: &str,
) -> String {
    let mut hints: Vec<&str> = signals.iter().map(|s| signal_hint(*s)).collect();
    if has_manual {
        hints.push(
            "NOTE: facts marked [MANUAL] were written by the user; keep them unless the conversation explicitly corrects them.",
        );
    }
    let mut out = format!(
        "Current memory:\n<current_memory>\n{current_memory}\n</current_memory>\n\n\
         New conversation:\n<conversation>\n{conversation}\n</conversation>\n"
    );
    if !hints.is_empty() {
        out.push('\n');
        out.push_str(&hints.join("\n"));
        out.push('\n');
    }
    for section in [staleness, consolidation] {
        if !section.is_empty() {
            out.push('\n');
            out.push_str(section);
            out.push('\n');
        }
    }
    out.push_str("\nReturn the JSON object with the changes.");
    out
}

/// The first JSON object in a reply that has `user`, `history` and `newFacts` (prose, fences
/// and thinking around it are tolerated; broken JSON is not repaired).
pub fn find_update_object(text: &str) -> Option<Map<String, Value>> {
    for (i, _) in text.match_indices('{') {
        let mut it = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(o))) = it.next() {
            if ["user", "history", "newFacts"]
                .iter()
                .all(|k| o.contains_key(*k))
            {
                return Some(o);
            }
        }
    }
    None
}

/// How injection counts tokens (`backend_config.token_counting`).
#[derive(Clone, Debug)]
pub enum TokenCounting {
    /// The shared tokenizer (cl100k family).
    Tiktoken(TokenCounter),
    /// A network-free estimate: 4 characters a token, 2 for CJK.
    Char,
}

impl TokenCounting {
    pub fn from_setting(setting: &str) -> TokenCounting {
        if setting.eq_ignore_ascii_case("char") {
            TokenCounting::Char
        } else {
            TokenCounting::Tiktoken(TokenCounter::for_model("gpt-4"))
        }
    }

    pub fn count(&self, text: &str) -> usize {
        match self {
            TokenCounting::Tiktoken(c) => c.count_text(text),
            TokenCounting::Char => {
                let mut cjk = 0usize;
                let mut other = 0usize;
                for ch in text.chars() {
                    if ('\u{4e00}'..='\u{9fff}').contains(&ch)
                        || ('\u{3040}'..='\u{30ff}').contains(&ch)
                        || ('\u{ac00}'..='\u{d7a3}').contains(&ch)
                    {
                        cjk += 1;
                    } else {
                        other += 1;
                    }
                }
                other / 4 + cjk / 2
            }
        }
    }
}

/// Token budgets of the injected block.
#[derive(Clone, Debug)]
pub struct InjectionBudget {
    /// `max_injection_tokens`.
    pub max_tokens: usize,
    /// Categories injected from their own budget first (`["correction"]`).
    pub guaranteed_categories: Vec<String>,
    /// `guaranteed_token_budget`.
    pub guaranteed_tokens: usize,
}

impl Default for InjectionBudget {
    fn default() -> Self {
        InjectionBudget {
            max_tokens: 2000,
            guaranteed_categories: vec!["correction".to_owned()],
            guaranteed_tokens: 500,
        }
    }
}

/// `- [category | 0.95] content (avoid: …)`, or `None` for a fact without text.
pub fn fact_line(fact: &Fact) -> Option<String> {
    let content = escape(fact.text()?);
    let category = fact
        .category
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .unwrap_or("context");
    let category = escape(category);
    let conf = fact.confidence();
    let avoid = fact
        .source_error
        .as_deref()
        .map(str::trim)
        .filter(|e| category == "correction" && !e.is_empty());
    Some(match avoid {
        Some(e) => format!(
            "- [{category} | {conf:.2}] {content} (avoid: {})",
            escape(e)
        ),
        None => format!("- [{category} | {conf:.2}] {content}"),
    })
}

/// Greedy selection in order, stopping at the first line that does not fit.
fn select(facts: &[&Fact], budget: usize, tokens: &TokenCounting) -> (Vec<String>, usize) {
    let mut lines: Vec<String> = Vec::new();
    let mut used = 0;
    for f in facts {
        let Some(line) = fact_line(f) else {
            continue;
        };
        let cost = if lines.is_empty() {
            tokens.count(&line)
        } else {
            tokens.count(&format!("\n{line}"))
        };
        if used + cost > budget {
            break;
        }
        used += cost;
        lines.push(line);
    }
    (lines, used)
}

fn by_confidence(mut facts: Vec<&Fact>) -> Vec<&Fact> {
    // Stable: equal confidence keeps storage (age) order.
    facts.sort_by(|a, b| b.confidence().total_cmp(&a.confidence()));
    facts
}

/// `Title:` and a `- Label: summary` line per non-empty summary; `None` when all are empty.
fn summary_section(title: &str, rows: [(&str, &Section); 3]) -> Option<String> {
    let lines: Vec<String> = rows
        .iter()
        .filter(|(_, s)| !s.summary.is_empty())
        .map(|(label, s)| format!("- {label}: {}", escape(&s.summary)))
        .collect();
    (!lines.is_empty()).then(|| format!("{title}:\n{}", lines.join("\n")))
}

/// The memory block's text (without the `<memory>` tags), empty when there is nothing to say.
pub fn format_injection(
    profile: &Profile,
    facts: &[Fact],
    budget: &InjectionBudget,
    tokens: &TokenCounting,
) -> String {
    let mut sections: Vec<String> = Vec::new();
    let (u, h) = (&profile.user, &profile.history);
    sections.extend(summary_section(
        "User Context",
        [
            ("Work", &u.work_context),
            ("Personal", &u.personal_context),
            ("Current Focus", &u.top_of_mind),
        ],
    ));
    sections.extend(summary_section(
        "History",
        [
            ("Recent", &h.recent_months),
            ("Earlier", &h.earlier_context),
            ("Background", &h.long_term_background),
        ],
    ));

    const HEADER: &str = "Facts:\n";
    let mut fact_lines: Vec<String> = Vec::new();
    let mut guaranteed_used = 0;
    let valid: Vec<&Fact> = facts.iter().filter(|f| f.text().is_some()).collect();
    if !valid.is_empty() {
        let base = sections.join("\n\n");
        let base_tokens = if base.is_empty() {
            0
        } else {
            tokens.count(&base)
        };
        // Only an exact (trimmed) category match is guaranteed; category-less facts never are.
        let is_guaranteed = |f: &Fact| {
            f.category.as_deref().map(str::trim).is_some_and(|c| {
                !c.is_empty() && budget.guaranteed_categories.iter().any(|g| g.trim() == c)
            })
        };
        let (guaranteed, regular): (Vec<&Fact>, Vec<&Fact>) =
            valid.into_iter().partition(|f| is_guaranteed(f));
        let (g_lines, g_used) =
            select(&by_confidence(guaranteed), budget.guaranteed_tokens, tokens);
        guaranteed_used = g_used;
        let joiner = if g_lines.is_empty() {
            0
        } else {
            tokens.count("\n")
        };
        let used = base_tokens + tokens.count(HEADER) + g_used + joiner;
        let r_lines = if budget.max_tokens > used {
            select(&by_confidence(regular), budget.max_tokens - used, tokens).0
        } else {
            Vec::new()
        };
        fact_lines = g_lines.into_iter().chain(r_lines).collect();
        if !fact_lines.is_empty() {
            sections.push(format!("{HEADER}{}", fact_lines.join("\n")));
        }
    }
    if sections.is_empty() {
        return String::new();
    }
    let result = sections.join("\n\n");
    let limit = budget.max_tokens + guaranteed_used;
    if tokens.count(&result) <= limit {
        return result;
    }
    // Over budget: keep the facts block whole, cut the summaries before it.
    let facts_block = if fact_lines.is_empty() {
        String::new()
    } else {
        format!("{HEADER}{}", fact_lines.join("\n"))
    };
    let reserved = if facts_block.is_empty() {
        0
    } else {
        tokens.count(&facts_block) + tokens.count("\n\n")
    };
    let room = limit.saturating_sub(reserved);
    let preceding_sections = if facts_block.is_empty() {
        &sections[..]
    } else {
        &sections[..sections.len() - 1]
    };
    let mut preceding = preceding_sections.join("\n\n");
    if preceding.is_empty() {
        return facts_block;
    }
    let have = tokens.count(&preceding);
    if have > room {
        let chars = preceding.chars().count();
        let per_token = chars as f64 / have.max(1) as f64;
        let keep = (room as f64 * per_token * 0.95) as usize;
        let cut: String = preceding.chars().take(keep).collect();
        preceding = format!("{}\n...", cut.trim_end());
    }
    if facts_block.is_empty() {
        preceding
    } else {
        format!("{preceding}\n\n{facts_block}")
    }
}
