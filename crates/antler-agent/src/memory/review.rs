//! The two maintenance passes that ride on a memory update call (DeerMem's staleness review and
//! consolidation; spec 40 §4.6, §4.10). Neither makes a call of its own: when there is
//! something to review, a section is added to the update prompt, and the model's verdicts come
//! back in the same JSON (`staleFactsToRemove`, `staleFactsToExtend`, `factsToConsolidate`).
//!
//! Both are bounded deterministically at apply time, whatever the model answers: only facts
//! that were candidates may be removed, extended or merged (candidates are recomputed from the
//! memory being changed, so a fact id the model invents or a protected category it names is
//! ignored), and per-cycle caps hold.
//!
//! - **Staleness**: a fact is a candidate once its review window has passed — its
//!   `expected_valid_days`, else `staleness_age_days`, counted from `lastConfirmedAt` (a
//!   confirmation restarts the clock) or else `createdAt`. Protected categories (corrections by
//!   default) are never candidates. The review is asked for only with at least
//!   `staleness_min_candidates` candidates; at most `staleness_max_removals_per_cycle` go per
//!   cycle (least confident first); an extension sets the window to the fact's age plus the
//!   extension, at most `staleness_max_extension_days`.
//! - **Consolidation** (opt-in): categories holding at least `consolidation_min_facts` facts
//!   are offered (largest first, at most `consolidation_max_groups_per_cycle` groups of at most
//!   `consolidation_max_sources` facts). A merge needs 2..=`max_sources` unconsumed candidate
//!   sources and a merged fact passing the same gates as a new fact (user / durable /
//!   descriptive, confidence threshold); its confidence never exceeds its best source's, it
//!   keeps the newest source's `createdAt` and the earliest source review deadline, and records
//!   `source: "consolidation"` and `consolidatedFrom`. A merge that fails a gate keeps its
//!   sources.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeDelta, Utc};
use serde_json::Value;

use super::document::Fact;
use super::prompt::escape;
use super::MemorySettings;

const DAY_SECS: i64 = 86_400;

/// A fact timestamp: RFC 3339, or naive ISO date-time / date taken as UTC.
pub fn parse_time(raw: &str) -> Option<DateTime<Utc>> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Some(t.with_timezone(&Utc));
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S%.f") {
        return Some(t.and_utc());
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

/// Drops the facts whose id is in `ids`, appending each dropped id to `removed` in storage order.
pub(crate) fn remove_facts(
    facts: &mut Vec<Fact>,
    ids: &HashSet<String>,
    removed: &mut Vec<String>,
) {
    facts.retain(|f| {
        let gone = ids.contains(&f.id);
        if gone {
            removed.push(f.id.clone());
        }
        !gone
    });
}

fn add_days(t: DateTime<Utc>, days: i64) -> Option<DateTime<Utc>> {
    TimeDelta::try_days(days).and_then(|d| t.checked_add_signed(d))
}

fn whole_days(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_seconds().div_euclid(DAY_SECS)
}

/// The fact's review window in days: its positive `expected_valid_days`, else the global age.
pub fn review_window(fact: &Fact, settings: &MemorySettings) -> i64 {
    fact.expected_valid_days
        .filter(|d| *d > 0)
        .unwrap_or_else(|| i64::try_from(settings.staleness_age_days).unwrap_or(i64::MAX))
}

/// When the fact's review clock started: its last confirmation, else its creation.
fn review_reference(fact: &Fact) -> Option<DateTime<Utc>> {
    fact.last_confirmed_at
        .as_deref()
        .and_then(parse_time)
        .or_else(|| parse_time(&fact.created_at))
}

fn category_of(fact: &Fact) -> &str {
    fact.category.as_deref().unwrap_or("context")
}

fn protected(settings: &MemorySettings, category: &str) -> bool {
    settings
        .staleness
        .protected_categories
        .iter()
        .any(|c| c == category)
}

/// Facts past their review window (see the module doc), in storage order.
pub fn stale_candidates<'a>(
    facts: &'a [Fact],
    settings: &MemorySettings,
    now: DateTime<Utc>,
) -> Vec<&'a Fact> {
    facts
        .iter()
        .filter(|f| !protected(settings, category_of(f)))
        .filter(|f| {
            let Some(reference) = review_reference(f) else {
                return false;
            };
            // A window too large to subtract cannot have passed yet.
            add_days(now, -review_window(f, settings)).is_some_and(|cutoff| reference < cutoff)
        })
        .collect()
}

/// The staleness review section of the update prompt, empty when the review is off or there
/// are fewer candidates than `staleness_min_candidates`.
pub fn staleness_section(facts: &[Fact], settings: &MemorySettings, now: DateTime<Utc>) -> String {
    if !settings.staleness.enabled {
        return String::new();
    }
    let candidates = stale_candidates(facts, settings, now);
    if candidates.is_empty() || candidates.len() < settings.staleness.min_candidates {
        return String::new();
    }
    let lines: Vec<String> = candidates
        .iter()
        .map(|f| {
            let reviewed = review_reference(f)
                .map(|t| t.date_naive().to_string())
                .unwrap_or_default();
            format!(
                "- [{} | {} | {:.2} | {reviewed} | valid:{}d] \"{}\"",
                f.id,
                escape(category_of(f).trim()),
                f.confidence(),
                review_window(f, settings),
                escape(f.text().unwrap_or_default()),
            )
        })
        .collect();
    format!(
        "## Staleness review

These remembered facts have outlived the review window they were given and may no longer describe the user. Each line ends with `valid:Nd`, the number of days the fact was expected to stay true: a short window marked it as volatile when it was stored, a long one as stable.

<stale_facts>
{}
</stale_facts>

Decide for each fact:
- KEEP it when it is probably still true, even if this conversation does not mention it. Lasting traits (native language, core expertise, temperament) often stay true for good. Kept facts need no entry.
- REMOVE it when it is outdated, contradicted by recent context or no longer relevant (a stack migration, a new job, a move, an abandoned project): add {{\"id\": \"<fact id>\", \"reason\": \"<the signal, or its absence, behind the decision>\"}} to \"staleFactsToRemove\".
- EXTEND it when you keep it but its window was miscalibrated (a stable skill marked valid:30d, or a goal close to done whose window should shrink): add {{\"id\": \"<fact id>\", \"extend_by_days\": <days from now until the next review>, \"reason\": \"...\"}} to \"staleFactsToExtend\".

When in doubt, KEEP: deleting a true fact costs more than keeping a slightly stale one, which the next review sees again.",
        lines.join("\n")
    )
}

/// Categories with at least `consolidation_min_facts` facts, protected ones excepted.
pub fn consolidation_candidates<'a>(
    facts: &'a [Fact],
    settings: &MemorySettings,
) -> BTreeMap<String, Vec<&'a Fact>> {
    let mut groups: BTreeMap<String, Vec<&Fact>> = BTreeMap::new();
    for f in facts {
        let cat = category_of(f).trim();
        if !cat.is_empty() {
            groups.entry(cat.to_owned()).or_default().push(f);
        }
    }
    let min = settings.consolidation.min_facts.max(1);
    groups.retain(|cat, g| g.len() >= min && !protected(settings, cat));
    groups
}

/// The consolidation section of the update prompt, empty when consolidation is off or no
/// category is fragmented enough. Shows exactly what the caps let a merge use.
pub fn consolidation_section(facts: &[Fact], settings: &MemorySettings) -> String {
    let c = &settings.consolidation;
    if !c.enabled {
        return String::new();
    }
    let candidates = consolidation_candidates(facts, settings);
    if candidates.is_empty() {
        return String::new();
    }
    let mut groups: Vec<(&String, &Vec<&Fact>)> = candidates.iter().collect();
    // Most fragmented first; the map's order breaks ties alphabetically.
    groups.sort_by_key(|(_, g)| std::cmp::Reverse(g.len()));
    let parts: Vec<String> = groups
        .into_iter()
        .take(c.max_groups_per_cycle)
        .map(|(cat, group)| {
            let shown: Vec<String> = group
                .iter()
                .take(c.max_sources)
                .map(|f| {
                    format!(
                        "- [{} | {:.2}] \"{}\"",
                        f.id,
                        f.confidence(),
                        escape(f.text().unwrap_or_default())
                    )
                })
                .collect();
            format!(
                "<consolidation_candidates category=\"{}\" count=\"{}\">\n{}\n</consolidation_candidates>",
                escape(cat).replace('"', "&quot;"),
                shown.len(),
                shown.join("\n")
            )
        })
        .collect();
    format!(
        "## Memory consolidation

Some categories have gathered many separate facts. Where several facts describe the same aspect of the user, merge them into one richer fact that keeps every detail.

{}

For each group either merge (CONSOLIDATE) or leave the facts as they are (SKIP). Put each merge in \"factsToConsolidate\":
{{\"sourceIds\": [\"<fact id>\", \"<fact id>\"], \"consolidated\": {{\"content\": \"...\", \"category\": \"...\", \"confidence\": 0.9, \"scope\": \"user|thread|project\", \"durability\": \"durable|temporary\", \"authority\": \"descriptive|transactional\"}}}}

Rules:
- The merged fact keeps all key details of its sources, and only facts about the same aspect are merged.
- Label the merged fact like any fact; only a user-scoped, durable, descriptive fact that is safe to show in unrelated conversations is kept.
- Its confidence is the highest of its sources' confidences.
- When in doubt, keep the facts separate. At most {} merges per update.",
        parts.join("\n\n"),
        c.max_groups_per_cycle
    )
}

/// A `staleFactsToRemove` verdict.
#[derive(Clone, Debug, Default)]
pub struct StaleRemoval {
    pub id: String,
    pub reason: String,
}

/// A `staleFactsToExtend` verdict (`extend_by_days` whole and positive).
#[derive(Clone, Debug, Default)]
pub struct StaleExtension {
    pub id: String,
    pub extend_by_days: i64,
    pub reason: String,
}

/// What the staleness verdicts did.
#[derive(Default)]
pub struct StaleOutcome {
    pub removed: Vec<String>,
    pub extended: Vec<String>,
}

/// Apply staleness verdicts, limited to current candidates. Runs whether or not the review is
/// enabled now (the verdicts may answer a prompt built before a config change; the candidate
/// check still bounds them).
pub fn apply_staleness(
    facts: &mut Vec<Fact>,
    settings: &MemorySettings,
    now: DateTime<Utc>,
    remove: &[StaleRemoval],
    extend: &[StaleExtension],
) -> StaleOutcome {
    let mut out = StaleOutcome::default();
    if remove.is_empty() && extend.is_empty() {
        return out;
    }
    let candidates: HashSet<String> = stale_candidates(facts, settings, now)
        .into_iter()
        .map(|f| f.id.clone())
        .collect();
    // Every proposed removal, even one the cap spares, is never extended.
    let proposed: HashSet<&str> = remove.iter().map(|r| r.id.as_str()).collect();
    let mut doomed: Vec<(usize, f64)> = facts
        .iter()
        .enumerate()
        .filter(|(_, f)| proposed.contains(f.id.as_str()) && candidates.contains(&f.id))
        .map(|(i, f)| (i, f.confidence()))
        .collect();
    // Over the cap: the least confident go first (stable, so ties go oldest first).
    doomed.sort_by(|a, b| a.1.total_cmp(&b.1));
    doomed.truncate(settings.staleness.max_removals_per_cycle);
    let doomed: HashSet<usize> = doomed.into_iter().map(|(i, _)| i).collect();
    let reasons: HashMap<&str, &str> = remove
        .iter()
        .map(|r| (r.id.as_str(), r.reason.as_str()))
        .collect();
    let mut i = 0;
    facts.retain(|f| {
        let drop = doomed.contains(&i);
        i += 1;
        if drop {
            tracing::info!(fact = %f.id, reason = reasons.get(f.id.as_str()).copied().unwrap_or(""), "memory: staleness review removed a fact");
            out.removed.push(f.id.clone());
        }
        !drop
    });

    let extensions: HashMap<&str, (i64, &str)> = extend
        .iter()
        .filter(|e| candidates.contains(&e.id) && !proposed.contains(e.id.as_str()))
        .map(|e| (e.id.as_str(), (e.extend_by_days, e.reason.as_str())))
        .collect();
    for f in facts.iter_mut() {
        let Some((by, reason)) = extensions.get(f.id.as_str()) else {
            continue;
        };
        let Some(created) = parse_time(&f.created_at) else {
            continue;
        };
        let age = whole_days(created, now).max(0);
        let window = age
            .saturating_add(*by)
            .min(settings.staleness.max_extension_days);
        tracing::info!(fact = %f.id, extend_by = by, window, reason, "memory: staleness review extended a fact");
        f.expected_valid_days = Some(window);
        out.extended.push(f.id.clone());
    }
    out
}

/// A proposed merge, as parsed.
pub struct Merge<'a> {
    pub source_ids: &'a [String],
    pub content: &'a str,
    pub category: &'a str,
    pub confidence: f64,
    /// `None` when the merged fact passes the user / durable / descriptive gate, else the
    /// rejection reason (`missing`, `scope`, `durability`, `authority`).
    pub gate: Option<&'static str>,
}

/// What consolidation did.
#[derive(Default)]
pub struct MergeOutcome {
    pub created: Vec<String>,
    pub consumed: Vec<String>,
    /// Gate rejections by reason.
    pub rejected: Vec<&'static str>,
}

/// Apply merges (only when `consolidation_enabled`, checked at apply time too: a config change
/// racing a queued update must not merge facts the operator wants kept apart).
pub fn apply_consolidation(
    facts: &mut Vec<Fact>,
    settings: &MemorySettings,
    now: DateTime<Utc>,
    merges: &[Merge<'_>],
    new_id: impl Fn() -> String,
) -> MergeOutcome {
    let mut out = MergeOutcome::default();
    let c = &settings.consolidation;
    if !c.enabled || merges.is_empty() {
        return out;
    }
    let allowed: HashSet<String> = consolidation_candidates(facts, settings)
        .into_values()
        .flatten()
        .map(|f| f.id.clone())
        .collect();
    let now_str = now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let index: HashMap<&str, &Fact> = facts.iter().map(|f| (f.id.as_str(), f)).collect();
    let global = i64::try_from(settings.staleness_age_days).unwrap_or(i64::MAX);
    let creation_cap =
        (settings.staleness_age_days as f64 * settings.staleness_max_lifetime_multiplier) as i64;
    let mut consumed: HashSet<String> = HashSet::new();
    let mut created: Vec<Fact> = Vec::new();
    for m in merges {
        if created.len() >= c.max_groups_per_cycle {
            break;
        }
        let usable = m.source_ids.iter().all(|id| {
            !consumed.contains(id) && allowed.contains(id) && index.contains_key(id.as_str())
        });
        if !usable || !(2..=c.max_sources).contains(&m.source_ids.len()) {
            continue;
        }
        if m.content.trim().is_empty() {
            continue;
        }
        if let Some(why) = m.gate {
            out.rejected.push(why);
            continue;
        }
        let sources: Vec<&Fact> = m.source_ids.iter().map(|id| index[id.as_str()]).collect();
        let best = sources.iter().map(|f| f.confidence()).fold(0.0, f64::max);
        // A merge never claims more certainty than its best source.
        let confidence = m.confidence.clamp(0.0, 1.0).min(best);
        if confidence < settings.fact_confidence_threshold {
            continue;
        }
        let dates: Vec<DateTime<Utc>> = sources
            .iter()
            .map(|f| parse_time(&f.created_at).unwrap_or(now))
            .collect();
        let newest = dates.iter().copied().max().unwrap_or(now);
        // Re-review at the earliest source deadline: a volatile detail must not inherit a
        // stable sibling's long window.
        let earliest = sources
            .iter()
            .zip(&dates)
            .map(|(f, d)| {
                add_days(*d, review_window(f, settings))
                    .or_else(|| add_days(*d, global))
                    .unwrap_or(newest)
            })
            .min()
            .unwrap_or(newest);
        let window = whole_days(newest, earliest).max(1).min(creation_cap.max(1));
        let mut errors: Vec<&str> = Vec::new();
        for e in sources
            .iter()
            .filter_map(|f| f.source_error.as_deref())
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
        let mut fact = Fact {
            id: new_id(),
            content: Value::from(m.content.trim()),
            category: Some(m.category.to_owned()),
            confidence: Value::from(confidence),
            created_at: newest.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            source: Value::from("consolidation"),
            source_error: (!errors.is_empty()).then(|| errors.join("\n")),
            expected_valid_days: Some(window),
            ..Default::default()
        };
        fact.extra
            .insert("consolidatedAt".into(), Value::from(now_str.as_str()));
        fact.extra.insert(
            "consolidatedFrom".into(),
            Value::from(m.source_ids.to_vec()),
        );
        tracing::info!(sources = m.source_ids.len(), fact = %fact.id, "memory: consolidated facts");
        consumed.extend(m.source_ids.iter().cloned());
        created.push(fact);
    }
    if !consumed.is_empty() {
        remove_facts(facts, &consumed, &mut out.consumed);
        out.created = created.iter().map(|f| f.id.clone()).collect();
        facts.extend(created);
    }
    out
}

#[cfg(test)]
#[path = "review_tests.rs"]
mod tests;
