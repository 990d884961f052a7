#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use super::*;
use crate::memory::MemorySettings;

fn now() -> DateTime<Utc> {
    parse_time("2026-06-01T12:00:00Z").unwrap()
}

fn ago(days: i64) -> String {
    (now() - TimeDelta::days(days)).to_rfc3339()
}

fn fact(id: &str, category: &str, confidence: f64, days_old: i64) -> Fact {
    Fact {
        id: id.into(),
        content: json!(format!("content of {id}")),
        category: Some(category.into()),
        confidence: json!(confidence),
        created_at: ago(days_old),
        source: json!("thread-1"),
        ..Default::default()
    }
}

fn ids(facts: &[&Fact]) -> Vec<String> {
    facts.iter().map(|f| f.id.clone()).collect()
}

fn consolidating() -> MemorySettings {
    let mut s = MemorySettings::default();
    s.consolidation.enabled = true;
    s.consolidation.min_facts = 3;
    s
}

/// `consolidating()` with at most `groups` merges per cycle of at most `sources` facts each.
fn consolidating_at_most(groups: usize, sources: usize) -> MemorySettings {
    let mut s = consolidating();
    s.consolidation.max_groups_per_cycle = groups;
    s.consolidation.max_sources = sources;
    s
}

#[test]
fn timestamps_parse_in_the_shapes_facts_carry() {
    assert_eq!(
        parse_time("2026-06-01T12:00:00+02:00").unwrap(),
        parse_time("2026-06-01T10:00:00Z").unwrap()
    );
    assert_eq!(
        parse_time("2026-06-01T10:00:00.123456").unwrap(),
        parse_time("2026-06-01T10:00:00.123456Z").unwrap()
    );
    assert_eq!(
        parse_time("2026-06-01").unwrap(),
        parse_time("2026-06-01T00:00:00Z").unwrap()
    );
    assert!(parse_time("").is_none());
    assert!(parse_time("yesterday").is_none());
}

#[test]
fn candidates_are_facts_past_their_own_window_except_protected_ones() {
    let s = MemorySettings::default(); // staleness_age_days 90
    let mut short = fact("short", "goal", 0.9, 40);
    short.expected_valid_days = Some(30);
    let mut long = fact("long", "knowledge", 0.9, 400);
    long.expected_valid_days = Some(1000);
    let mut confirmed = fact("confirmed", "context", 0.9, 200);
    confirmed.last_confirmed_at = Some(ago(10));
    let mut undated = fact("undated", "context", 0.9, 0);
    undated.created_at = "not a date".into();
    let mut huge = fact("huge", "context", 0.9, 500);
    huge.expected_valid_days = Some(i64::MAX);
    let mut zero = fact("zero", "context", 0.9, 100);
    zero.expected_valid_days = Some(0); // not a window: the global age applies
    let facts = vec![
        fact("old", "preference", 0.8, 91),
        fact("young", "preference", 0.8, 89),
        fact("correction", "correction", 0.99, 500),
        short,
        long,
        confirmed,
        undated,
        huge,
        zero,
    ];
    assert_eq!(
        ids(&stale_candidates(&facts, &s, now())),
        ["old", "short", "zero"]
    );
    // Protection is configurable.
    let mut s = s;
    s.staleness.protected_categories = vec!["preference".into()];
    assert_eq!(
        ids(&stale_candidates(&facts, &s, now())),
        ["correction", "short", "zero"]
    );
}

#[test]
fn the_review_section_needs_enough_candidates_and_escapes_content() {
    let mut s = MemorySettings::default();
    let mut a = fact("fact_a", "preference", 0.8, 120);
    a.content = json!("Uses </stale_facts> & \"vim\"");
    let mut b = fact("fact_b", "goal", 0.75, 50);
    b.expected_valid_days = Some(30);
    let facts = vec![a, b, fact("fact_c", "context", 0.9, 10)];
    // Two candidates, three needed (the default).
    assert_eq!(staleness_section(&facts, &s, now()), "");
    s.staleness.min_candidates = 2;
    let section = staleness_section(&facts, &s, now());
    assert!(section.starts_with("## Staleness review"), "{section}");
    let reviewed = (now() - TimeDelta::days(120)).date_naive();
    assert!(
        section.contains(&format!(
            "- [fact_a | preference | 0.80 | {reviewed} | valid:90d] \"Uses &lt;/stale_facts&gt; &amp; \"vim\"\"\n"
        )),
        "{section}"
    );
    assert!(section.contains("| valid:30d] \"content of fact_b\""));
    assert!(!section.contains("fact_c"));
    assert!(section.contains("staleFactsToRemove") && section.contains("staleFactsToExtend"));
    s.staleness.enabled = false;
    assert_eq!(staleness_section(&facts, &s, now()), "");
}

/// Default settings, at most `n` stale removals per cycle.
fn removing_at_most(n: usize) -> MemorySettings {
    let mut s = MemorySettings::default();
    s.staleness.max_removals_per_cycle = n;
    s
}

/// `apply_staleness` now.
fn review(
    facts: &mut Vec<Fact>,
    s: &MemorySettings,
    remove: &[StaleRemoval],
    extend: &[StaleExtension],
) -> StaleOutcome {
    apply_staleness(facts, s, now(), remove, extend)
}

fn removal(id: &str) -> StaleRemoval {
    StaleRemoval {
        id: id.into(),
        reason: "outdated".into(),
    }
}

fn extension(id: &str, days: i64) -> StaleExtension {
    StaleExtension {
        id: id.into(),
        extend_by_days: days,
        reason: "recalibrated".into(),
    }
}

#[test]
fn stale_removals_touch_only_candidates_and_respect_the_cap_least_confident_first() {
    let s = removing_at_most(2);
    let mut facts = vec![
        fact("a", "context", 0.9, 100),
        fact("b", "context", 0.7, 100),
        fact("c", "context", 0.8, 100),
        fact("fresh", "context", 0.5, 5),
        fact("fix", "correction", 0.5, 500),
    ];
    let out = review(
        &mut facts,
        &s,
        &[
            removal("a"),
            removal("b"),
            removal("c"),
            removal("fresh"),
            removal("fix"),
            removal("invented"),
        ],
        &[],
    );
    // Not aged, protected and unknown ids are ignored; of the three, the two least confident go.
    assert_eq!(out.removed, ["b", "c"]);
    let left: Vec<&str> = facts.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(left, ["a", "fresh", "fix"]);
}

#[test]
fn extensions_recalibrate_kept_candidates_up_to_the_ceiling() {
    let mut s = removing_at_most(1);
    s.staleness.max_extension_days = 500;
    let mut facts = vec![
        fact("a", "knowledge", 0.9, 100),
        fact("b", "knowledge", 0.9, 120),
        fact("c", "knowledge", 0.6, 100),
        fact("d", "knowledge", 0.9, 100),
        fact("fresh", "knowledge", 0.9, 5),
    ];
    let out = review(
        &mut facts,
        &s,
        // c goes (least confident); d was proposed too and survives only through the cap.
        &[removal("c"), removal("d")],
        &[
            extension("a", 365),
            extension("b", 1000),
            extension("d", 365),
            extension("fresh", 365),
        ],
    );
    assert_eq!(out.removed, ["c"]);
    assert_eq!(out.extended, ["a", "b"]);
    let evd = |id: &str| {
        facts
            .iter()
            .find(|f| f.id == id)
            .unwrap()
            .expected_valid_days
    };
    // The fact's age plus the extension, capped by staleness_max_extension_days.
    assert_eq!(evd("a"), Some(465));
    assert_eq!(evd("b"), Some(500));
    assert_eq!(evd("d"), None, "a proposed removal is never extended");
    assert_eq!(evd("fresh"), None);
    // Extended past its new window, "a" is no longer a candidate.
    assert!(!ids(&stale_candidates(&facts, &s, now())).contains(&"a".to_owned()));
}

fn numbered(category: &str, n: usize, confidence: f64) -> Vec<Fact> {
    (0..n)
        .map(|i| fact(&format!("{category}{i}"), category, confidence, 10))
        .collect()
}

#[test]
fn consolidation_offers_large_unprotected_categories_within_the_caps() {
    let mut s = consolidating_at_most(2, 4);
    let mut facts = numbered("pref", 5, 0.9);
    facts.extend(numbered("goal", 3, 0.8));
    facts.extend(numbered("ctx", 6, 0.8));
    facts.extend(numbered("correction", 9, 0.99));
    facts.extend(numbered("small", 2, 0.8));
    let groups = consolidation_candidates(&facts, &s);
    let names: Vec<&str> = groups.keys().map(String::as_str).collect();
    assert_eq!(names, ["ctx", "goal", "pref"]);

    let section = consolidation_section(&facts, &s);
    // Largest first, two groups, four facts each at most.
    let ctx = section
        .find("<consolidation_candidates category=\"ctx\" count=\"4\">")
        .unwrap();
    let pref = section
        .find("<consolidation_candidates category=\"pref\" count=\"4\">")
        .unwrap();
    assert!(ctx < pref, "{section}");
    assert!(!section.contains("category=\"goal\""));
    assert!(section.contains("- [ctx0 | 0.80] \"content of ctx0\""));
    assert!(!section.contains("ctx4"));
    assert!(!section.contains("correction0"));
    assert!(section.contains("At most 2 merges per update."));
    s.consolidation.enabled = false;
    assert_eq!(consolidation_section(&facts, &s), "");
}

fn merge<'a>(ids: &'a [String], content: &'a str, confidence: f64) -> Merge<'a> {
    Merge {
        source_ids: ids,
        content,
        category: "pref",
        confidence,
        gate: None,
    }
}

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

fn counter() -> impl Fn() -> String {
    let n = std::cell::Cell::new(0);
    move || {
        n.set(n.get() + 1);
        format!("fact_merged{}", n.get())
    }
}

/// `apply_consolidation` now, with fresh ids `fact_merged1`, `fact_merged2`, …
fn consolidate(facts: &mut Vec<Fact>, s: &MemorySettings, merges: &[Merge<'_>]) -> MergeOutcome {
    apply_consolidation(facts, s, now(), merges, counter())
}

#[test]
fn a_merge_replaces_its_sources_with_a_consolidation_fact() {
    let s = consolidating();
    let mut facts = numbered("pref", 4, 0.8);
    facts[0].confidence = json!(0.9);
    facts[0].created_at = ago(30);
    facts[0].source_error = Some("suggested tabs".into());
    facts[1].created_at = ago(20);
    facts[1].expected_valid_days = Some(25); // the earliest deadline, 25 days after it was made
    facts[1].source_error = Some("suggested tabs".into());
    let sources = strings(&["pref0", "pref1"]);
    let out = consolidate(
        &mut facts,
        &s,
        &[merge(&sources, "  Prefers spaces, four wide  ", 0.95)],
    );
    assert_eq!(out.created, ["fact_merged1"]);
    assert_eq!(out.consumed, ["pref0", "pref1"]);
    let ids: Vec<&str> = facts.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["pref2", "pref3", "fact_merged1"]);
    let merged = serde_json::to_value(facts.last().unwrap()).unwrap();
    assert_eq!(merged["content"], "Prefers spaces, four wide");
    assert_eq!(merged["source"], "consolidation");
    assert_eq!(merged["consolidatedFrom"], json!(["pref0", "pref1"]));
    // Never more confident than the best source.
    assert_eq!(merged["confidence"], 0.9);
    // The newest source's age, the earliest source deadline.
    assert_eq!(
        parse_time(merged["createdAt"].as_str().unwrap()).unwrap(),
        now() - TimeDelta::days(20)
    );
    assert_eq!(merged["expected_valid_days"], 25);
    assert_eq!(merged["sourceError"], "suggested tabs");
    assert!(merged["consolidatedAt"].is_string());
}

#[test]
fn merges_that_break_a_guardrail_keep_their_sources() {
    let s = consolidating_at_most(2, 3);
    let mut facts = numbered("pref", 6, 0.8);
    facts.extend(numbered("correction", 4, 0.99));
    facts.extend(numbered("small", 1, 0.9));
    let too_many = strings(&["pref0", "pref1", "pref2", "pref3"]);
    let protected = strings(&["correction0", "correction1"]);
    let unknown = strings(&["pref0", "fact_nope"]);
    let below_group_size = strings(&["pref0", "small0"]);
    let weak = strings(&["pref4", "pref5"]);
    let unclassified = strings(&["pref4", "pref5"]);
    let first = strings(&["pref0", "pref1"]);
    let reuses = strings(&["pref1", "pref2"]);
    let second = strings(&["pref2", "pref3"]);
    let third = strings(&["pref4", "pref5"]);
    let mut s_weak = s.clone();
    s_weak.fact_confidence_threshold = 0.85;
    let mut gated = merge(&unclassified, "x", 0.9);
    gated.gate = Some("missing");
    let out = consolidate(
        &mut facts.clone(),
        &s_weak,
        &[
            merge(&too_many, "x", 0.9),
            merge(&protected, "x", 0.99),
            merge(&unknown, "x", 0.9),
            merge(&below_group_size, "x", 0.9),
            merge(&weak, "x", 0.9), // capped at 0.8 by its sources: below 0.85
            gated,
        ],
    );
    assert!(out.created.is_empty() && out.consumed.is_empty());
    assert_eq!(out.rejected, ["missing"]);

    // The per-cycle cap counts successes; a source is used once per cycle.
    let out = consolidate(
        &mut facts,
        &s,
        &[
            merge(&first, "a", 0.8),
            merge(&reuses, "b", 0.8),
            merge(&second, "c", 0.8),
            merge(&third, "d", 0.8),
        ],
    );
    assert_eq!(out.created.len(), 2);
    assert_eq!(out.consumed, ["pref0", "pref1", "pref2", "pref3"]);
    assert!(facts.iter().any(|f| f.id == "pref4"));

    // Disabled at apply time: nothing happens.
    let mut off = consolidating();
    off.consolidation.enabled = false;
    let mut facts = numbered("pref", 4, 0.8);
    let out = consolidate(
        &mut facts,
        &off,
        &[merge(&strings(&["pref0", "pref1"]), "a", 0.8)],
    );
    assert!(out.created.is_empty());
    assert_eq!(facts.len(), 4);
}

#[test]
fn the_merged_window_is_at_least_a_day_and_at_most_the_creation_cap() {
    let mut s = consolidating();
    s.staleness_age_days = 30;
    s.staleness_max_lifetime_multiplier = 2.0; // cap 60 days
    let mut facts = numbered("pref", 3, 0.8);
    facts[0].created_at = ago(100); // 30-day window: long overdue
    facts[1].created_at = ago(1);
    let sources = strings(&["pref0", "pref1"]);
    let mut overdue = facts.clone();
    consolidate(&mut overdue, &s, &[merge(&sources, "a", 0.8)]);
    assert_eq!(overdue.last().unwrap().expected_valid_days, Some(1));

    for f in facts.iter_mut() {
        f.expected_valid_days = Some(1000);
        f.created_at = ago(1);
    }
    consolidate(&mut facts, &s, &[merge(&sources, "a", 0.8)]);
    assert_eq!(facts.last().unwrap().expected_valid_days, Some(60));
}

#[test]
fn a_missing_category_counts_as_context() {
    let s = consolidating();
    let mut facts = numbered("context", 2, 0.8);
    let mut bare = fact("bare", "x", 0.8, 1);
    bare.category = None;
    facts.push(bare);
    let groups = consolidation_candidates(&facts, &s);
    assert_eq!(groups["context"].len(), 3);
}
