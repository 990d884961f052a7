//! The memory updater: one memory-model call per queued conversation, then a deterministic write
//! gate (spec 40 §4.6).
//!
//! 1. Watermark: only messages after the last one already extracted for this
//!    `(thread, user, agent)` are fed (all of them if it is gone, e.g. summarized away — safe
//!    over-extraction, never a skipped turn). Summarization flushes bypass it.
//! 2. Signals are re-detected on the feed, so hints refer to turns the model sees.
//! 3. The model answers with a JSON change set; only `user`-scoped, `durable`, `descriptive`
//!    facts at or above the confidence threshold and `user`/`descriptive` summaries pass;
//!    removals need a user scope and a reason, and a paired removal runs only if its replacement
//!    survived; capacity keeps the most confident `max_facts`; upload events are scrubbed.
//!    The same answer carries the staleness review and consolidation verdicts when the prompt
//!    asked for them ([`super::review`]): stale verdicts apply before new facts, merges after
//!    capacity and removals.
//! 4. The change is saved against the revision it was computed from; on a conflict the memory is
//!    reloaded and the same answer re-applied (at most 3 attempts).
//!
//! Failures are returned to the queue, which counts and journals them; they never reach a run.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use antler_middleware::memory::preprocess::{
    detect_signals, mentions_upload, message_text, strip_upload_sentences, Signal,
};
use antler_models::{ChatModel, ChatRequest, ModelError};
use antler_protocol::{Message, Object, UsageMetadata};
use antler_store::{MemoryChange, MemorySave, MemorySnapshot, SqliteStore, StoreError};
use serde_json::{Map, Value};

use super::document::{content_key, Fact, Profile, Section};
use super::prompt::{
    current_memory_json, find_update_object, format_conversation, update_user_prompt,
    UPDATE_SYSTEM_PROMPT,
};
use super::queue::QueueItem;
use super::review::{self, StaleExtension, StaleRemoval};
use super::{bucket_of, user_of, MemorySettings, ModelSource};

/// Why an update failed (never raised into a run).
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("memory model is not available: {0}")]
    NoModel(String),
    #[error("memory model call failed: {0}")]
    Model(#[from] ModelError),
    #[error("memory model answer is unusable: {0}")]
    Parse(String),
    #[error("memory store: {0}")]
    Store(#[from] StoreError),
    #[error("memory changed concurrently {0} times in a row; update dropped")]
    Conflict(usize),
}

/// Items the write gate refused, by kind and reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Rejections {
    pub facts: HashMap<&'static str, usize>,
    pub summaries: HashMap<&'static str, usize>,
    pub removals: HashMap<&'static str, usize>,
    pub consolidations: HashMap<&'static str, usize>,
}

impl Rejections {
    fn fact(&mut self, why: &'static str) {
        *self.facts.entry(why).or_default() += 1;
    }
    fn summary(&mut self, why: &'static str) {
        *self.summaries.entry(why).or_default() += 1;
    }
    fn removal(&mut self, why: &'static str) {
        *self.removals.entry(why).or_default() += 1;
    }
    fn consolidation(&mut self, why: &'static str) {
        *self.consolidations.entry(why).or_default() += 1;
    }
}

/// What one successful update did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct UpdateReport {
    /// `false` when nothing was new since the watermark (no model call).
    pub called_model: bool,
    pub facts_added: Vec<String>,
    pub facts_removed: Vec<String>,
    pub facts_reinforced: Vec<String>,
    /// Aged facts the staleness review removed.
    pub stale_removed: Vec<String>,
    /// Aged facts whose lifetime the staleness review recalibrated.
    pub stale_extended: Vec<String>,
    /// Facts created by consolidation (their sources are in `consolidated_from`).
    pub consolidated: Vec<String>,
    pub consolidated_from: Vec<String>,
    pub summaries_updated: Vec<String>,
    pub rejected: Rejections,
    pub signals: Vec<&'static str>,
    pub revision: i64,
    pub model: Option<String>,
    pub usage: Option<UsageMetadata>,
    pub latency_ms: u64,
}

/// A summary section of the model's answer.
#[derive(Clone, Debug, Default)]
struct SummaryUpdate {
    summary: String,
    should_update: bool,
    scope: Option<String>,
    authority: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct NewFact {
    content: String,
    category: String,
    confidence: f64,
    source_error: Option<String>,
    expected_valid_days: Option<i64>,
    scope: Option<String>,
    durability: Option<String>,
    authority: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Removal {
    id: String,
    scope: Option<String>,
    reason: Option<String>,
    /// `Some(None)`: present but not a valid index.
    replacement: Option<Option<usize>>,
}

#[derive(Clone, Debug, Default)]
struct Reinforce {
    id: String,
    scope: Option<String>,
    reason: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Consolidation {
    /// Deduplicated, at least two.
    source_ids: Vec<String>,
    /// The merged fact (content, category, confidence default 0.9, labels).
    fact: NewFact,
}

/// The model's change set, normalized.
#[derive(Clone, Debug, Default)]
pub(crate) struct ParsedUpdate {
    user: HashMap<String, SummaryUpdate>,
    history: HashMap<String, SummaryUpdate>,
    new_facts: Vec<NewFact>,
    reinforce: Vec<Reinforce>,
    remove: Vec<Removal>,
    stale_remove: Vec<StaleRemoval>,
    stale_extend: Vec<StaleExtension>,
    consolidate: Vec<Consolidation>,
}

fn label(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
}

fn text_of(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => matches!(s.trim().to_lowercase().as_str(), "true" | "yes" | "1"),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        _ => false,
    }
}

fn sections(v: Option<&Value>) -> HashMap<String, SummaryUpdate> {
    let mut out = HashMap::new();
    if let Some(Value::Object(o)) = v {
        for (k, s) in o {
            let Value::Object(s) = s else { continue };
            out.insert(
                k.clone(),
                SummaryUpdate {
                    summary: s
                        .get("summary")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    should_update: truthy(s.get("shouldUpdate")),
                    scope: label(s.get("scope")),
                    authority: label(s.get("authority")),
                },
            );
        }
    }
    out
}

fn parse_fact(v: &Value) -> Option<NewFact> {
    let o = v.as_object()?;
    let content = text_of(o.get("content"))?;
    let confidence = match o.get("confidence") {
        None => 0.5,
        Some(Value::Number(n)) => n.as_f64()?,
        Some(Value::String(s)) => s.trim().parse().ok()?,
        Some(_) => return None,
    };
    if !confidence.is_finite() {
        return None;
    }
    let expected_valid_days = match o.get("expected_valid_days") {
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.is_finite())
            .map(|f| f as i64)
            .filter(|d| *d > 0),
        _ => None,
    };
    Some(NewFact {
        content,
        category: text_of(o.get("category")).unwrap_or_else(|| "context".to_owned()),
        confidence,
        source_error: text_of(o.get("sourceError")),
        expected_valid_days,
        scope: label(o.get("scope")),
        durability: label(o.get("durability")),
        authority: label(o.get("authority")),
    })
}

/// Parse the model's reply (see [`find_update_object`]).
pub(crate) fn parse_update(text: &str) -> Result<ParsedUpdate, MemoryError> {
    let o = find_update_object(text).ok_or_else(|| {
        MemoryError::Parse("no JSON object with user, history and newFacts in the reply".into())
    })?;
    let mut dropped_fact = !matches!(o.get("newFacts"), Some(Value::Array(_)));
    let mut new_facts = Vec::new();
    if let Some(Value::Array(items)) = o.get("newFacts") {
        for item in items {
            match parse_fact(item) {
                Some(f) => new_facts.push(f),
                None => dropped_fact = true,
            }
        }
    }
    let mut remove = Vec::new();
    if let Some(Value::Array(items)) = o.get("factsToRemove") {
        for item in items {
            match item {
                // The legacy bare-id form has no scope: kept so the gate rejects it visibly.
                Value::String(id) if !id.trim().is_empty() => remove.push(Removal {
                    id: id.trim().to_owned(),
                    ..Default::default()
                }),
                Value::Object(r) => {
                    let Some(id) = text_of(r.get("id")) else {
                        continue;
                    };
                    let replacement = r.get("replacementFactIndex").map(|v| {
                        v.as_u64()
                            .filter(|_| !v.is_boolean())
                            .and_then(|i| usize::try_from(i).ok())
                    });
                    remove.push(Removal {
                        id,
                        scope: label(r.get("scope")),
                        reason: text_of(r.get("reason")),
                        replacement,
                    });
                }
                _ => {}
            }
        }
    }
    if !remove.is_empty() && dropped_fact {
        return Err(MemoryError::Parse(
            "factsToRemove together with malformed newFacts: refusing a partial update".into(),
        ));
    }
    let mut reinforce = Vec::new();
    if let Some(Value::Array(items)) = o.get("factsToReinforce") {
        for r in items.iter().filter_map(Value::as_object) {
            if let Some(id) = text_of(r.get("id")) {
                reinforce.push(Reinforce {
                    id,
                    scope: label(r.get("scope")),
                    reason: text_of(r.get("reason")),
                });
            }
        }
    }
    Ok(ParsedUpdate {
        user: sections(o.get("user")),
        history: sections(o.get("history")),
        new_facts,
        reinforce,
        remove,
        stale_remove: parse_stale_removals(o.get("staleFactsToRemove")),
        stale_extend: parse_stale_extensions(o.get("staleFactsToExtend")),
        consolidate: parse_consolidations(o.get("factsToConsolidate")),
    })
}

fn reason_of(o: &Map<String, Value>) -> String {
    o.get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn id_of(o: &Map<String, Value>) -> Option<String> {
    o.get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// What `parse` makes of each object of the array `v` (none when `v` is not an array).
fn parse_objects<T>(
    v: Option<&Value>,
    parse: impl FnMut(&Map<String, Value>) -> Option<T>,
) -> Vec<T> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_object)
        .filter_map(parse)
        .collect()
}

fn parse_stale_removals(v: Option<&Value>) -> Vec<StaleRemoval> {
    parse_objects(v, |o| {
        Some(StaleRemoval {
            id: id_of(o)?,
            reason: reason_of(o),
        })
    })
}

fn parse_stale_extensions(v: Option<&Value>) -> Vec<StaleExtension> {
    parse_objects(v, |o| {
        // Whole days (truncated), positive: 0.5 would be a zero-day extension.
        let days = o
            .get("extend_by_days")
            .and_then(Value::as_f64)
            .filter(|d| d.is_finite())
            .map(|d| d as i64)
            .filter(|d| *d > 0)?;
        Some(StaleExtension {
            id: id_of(o)?,
            extend_by_days: days,
            reason: reason_of(o),
        })
    })
}

fn parse_consolidations(v: Option<&Value>) -> Vec<Consolidation> {
    let Some(Value::Array(items)) = v else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for o in items.iter().filter_map(Value::as_object) {
        let Some(Value::Array(ids)) = o.get("sourceIds") else {
            continue;
        };
        let mut source_ids: Vec<String> = Vec::new();
        for id in ids
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            if !source_ids.iter().any(|s| s == id) {
                source_ids.push(id.to_owned());
            }
        }
        // One source (or the same id twice) is not a merge.
        if source_ids.len() < 2 {
            continue;
        }
        let Some(Value::Object(c)) = o.get("consolidated") else {
            continue;
        };
        let Some(content) = text_of(c.get("content")) else {
            continue;
        };
        let confidence = match c.get("confidence") {
            Some(Value::Number(n)) => n.as_f64().filter(|f| f.is_finite()).unwrap_or(0.9),
            _ => 0.9,
        };
        out.push(Consolidation {
            source_ids,
            fact: NewFact {
                content,
                category: text_of(c.get("category")).unwrap_or_else(|| "context".to_owned()),
                confidence,
                scope: label(c.get("scope")),
                durability: label(c.get("durability")),
                authority: label(c.get("authority")),
                ..Default::default()
            },
        });
    }
    out
}

/// Identity of a message for the watermark: its id, else its kind and text.
fn identity(m: &Message) -> Option<String> {
    if let Some(id) = m.id().filter(|id| !id.is_empty()) {
        return Some(format!("id:{id}"));
    }
    let text = message_text(m);
    (!text.is_empty()).then(|| format!("content:{}:{text}", m.kind()))
}

type WatermarkKey = (String, String, String);

/// A small LRU of the last extracted message per `(thread, user, agent)`.
#[derive(Default)]
struct Watermarks {
    map: HashMap<WatermarkKey, String>,
    order: VecDeque<WatermarkKey>,
}

impl Watermarks {
    fn get(&mut self, key: &WatermarkKey) -> Option<String> {
        let v = self.map.get(key).cloned()?;
        self.touch(key);
        Some(v)
    }

    fn touch(&mut self, key: &WatermarkKey) {
        if let Some(pos) = self.order.iter().position(|k| k == key) {
            self.order.remove(pos);
        }
        self.order.push_back(key.clone());
    }

    fn set(&mut self, key: WatermarkKey, value: String, cap: usize) {
        self.map.insert(key.clone(), value);
        self.touch(&key);
        while cap > 0 && self.order.len() > cap {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn new_fact_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("fact_{}", &id[..8])
}

fn decode_facts(snapshot: &MemorySnapshot) -> Vec<Fact> {
    snapshot
        .facts
        .iter()
        .filter_map(|v| match serde_json::from_value::<Fact>(v.clone()) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(error = %e, "skipping an undecodable memory fact");
                None
            }
        })
        .collect()
}

fn decode_profile(snapshot: &MemorySnapshot) -> Profile {
    match &snapshot.profile {
        Value::Null => Profile::default(),
        v => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "memory summaries do not decode; starting from empty ones");
            Profile::default()
        }),
    }
}

/// The loaded memory of one bucket.
pub(crate) struct Loaded {
    pub revision: i64,
    pub profile: Profile,
    pub facts: Vec<Fact>,
    pub updated_at: Option<String>,
}

pub(crate) async fn load(
    store: &SqliteStore,
    user: &str,
    bucket: &str,
) -> Result<Loaded, StoreError> {
    let snap = store.load_memory(user, bucket).await?;
    Ok(Loaded {
        revision: snap.revision,
        profile: decode_profile(&snap),
        facts: decode_facts(&snap),
        updated_at: snap.updated_at,
    })
}

/// Why a proposed fact fails the user / durable / descriptive gate, if it does.
fn fact_gate(f: &NewFact) -> Option<&'static str> {
    match (
        f.scope.as_deref(),
        f.durability.as_deref(),
        f.authority.as_deref(),
    ) {
        (None, _, _) | (_, None, _) | (_, _, None) => Some("missing"),
        (Some(s), _, _) if s != "user" => Some("scope"),
        (_, Some(d), _) if d != "durable" => Some("durability"),
        (_, _, Some(a)) if a != "descriptive" => Some("authority"),
        _ => None,
    }
}

/// Apply a parsed update to loaded memory (pure; see the module doc for the rules).
pub(crate) fn apply(
    settings: &MemorySettings,
    mut profile: Profile,
    mut facts: Vec<Fact>,
    update: &ParsedUpdate,
    thread_id: &str,
    signals: &BTreeSet<Signal>,
    now: &str,
) -> (Profile, Vec<Fact>, UpdateReport) {
    let mut report = UpdateReport::default();

    // Confirmations count only where the eviction policy uses them, and only when the user
    // confirmed something in words the deterministic detector recognised.
    if settings.tracks_confirmations() && signals.contains(&Signal::Reinforcement) {
        let ids: HashSet<&str> = update
            .reinforce
            .iter()
            .filter(|r| r.scope.as_deref() == Some("user") && r.reason.is_some())
            .map(|r| r.id.as_str())
            .collect();
        for f in facts.iter_mut().filter(|f| ids.contains(f.id.as_str())) {
            f.last_confirmed_at = Some(now.to_owned());
            f.confirmation_count = Some(f.confirmation_count.unwrap_or(0).max(0) + 1);
            report.facts_reinforced.push(f.id.clone());
        }
    }

    let gate_summaries = |parts: [(&'static str, &mut Section); 3],
                          updates: &HashMap<String, SummaryUpdate>,
                          report: &mut UpdateReport| {
        for (key, section) in parts {
            let Some(u) = updates.get(key) else { continue };
            if !u.should_update || u.summary.trim().is_empty() {
                continue;
            }
            match (u.scope.as_deref(), u.authority.as_deref()) {
                (None, _) | (_, None) => report.rejected.summary("missing"),
                (Some(s), _) if s != "user" => report.rejected.summary("scope"),
                (_, Some(a)) if a != "descriptive" => report.rejected.summary("authority"),
                _ => {
                    *section = Section {
                        summary: u.summary.clone(),
                        updated_at: now.to_owned(),
                    };
                    report.summaries_updated.push(key.to_owned());
                }
            }
        }
    };
    gate_summaries(profile.user_sections_mut(), &update.user, &mut report);
    gate_summaries(profile.history_sections_mut(), &update.history, &mut report);

    // Staleness verdicts, bounded by the candidates of the memory being changed.
    let now_at = review::parse_time(now).unwrap_or_else(chrono::Utc::now);
    let stale = review::apply_staleness(
        &mut facts,
        settings,
        now_at,
        &update.stale_remove,
        &update.stale_extend,
    );
    report.stale_removed = stale.removed;
    report.stale_extended = stale.extended;

    let mut keys: HashSet<String> = facts
        .iter()
        .filter_map(|f| f.text().and_then(content_key))
        .collect();
    let lifetime_cap =
        (settings.staleness_age_days as f64 * settings.staleness_max_lifetime_multiplier) as i64;
    let mut replacement_keys: HashMap<usize, String> = HashMap::new();
    let mut passed_threshold = 0usize;
    for (i, nf) in update.new_facts.iter().enumerate() {
        if nf.confidence >= settings.fact_confidence_threshold {
            passed_threshold += 1;
        }
        if let Some(why) = fact_gate(nf) {
            report.rejected.fact(why);
            continue;
        }
        if nf.confidence < settings.fact_confidence_threshold {
            report.rejected.fact("confidence");
            continue;
        }
        let Some(key) = content_key(&nf.content) else {
            continue;
        };
        replacement_keys.insert(i, key.clone());
        if !keys.insert(key) {
            continue;
        }
        let fact = Fact {
            id: new_fact_id(),
            content: Value::from(nf.content.clone()),
            category: Some(nf.category.clone()),
            confidence: Value::from(nf.confidence),
            created_at: now.to_owned(),
            source: Value::from(thread_id),
            source_error: nf.source_error.clone(),
            expected_valid_days: nf.expected_valid_days.map(|d| d.min(lifetime_cap.max(1))),
            last_confirmed_at: None,
            confirmation_count: None,
            extra: Map::new(),
        };
        report.facts_added.push(fact.id.clone());
        facts.push(fact);
    }
    let total = update.new_facts.len();
    if total > 0 && (total - passed_threshold) * 10 > total * 6 {
        tracing::warn!(
            rejected = total - passed_threshold,
            total,
            "memory: more than 60% of extracted facts fell below the confidence threshold"
        );
    }

    // Capacity: keep the most confident (storage order kept among the survivors).
    if facts.len() > settings.max_facts {
        let mut ranked: Vec<(usize, f64)> = facts
            .iter()
            .enumerate()
            .map(|(i, f)| (i, f.confidence()))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        let keep: HashSet<usize> = ranked
            .iter()
            .take(settings.max_facts)
            .map(|(i, _)| *i)
            .collect();
        let mut i = 0;
        facts.retain(|f| {
            let kept = keep.contains(&i);
            i += 1;
            if !kept {
                report.facts_added.retain(|id| id != &f.id);
            }
            kept
        });
    }

    // Removals, after replacements passed every gate.
    let mut remove_ids: HashSet<String> = HashSet::new();
    for r in &update.remove {
        if r.scope.is_none() || r.reason.is_none() {
            report.rejected.removal("missing");
            continue;
        }
        if r.scope.as_deref() != Some("user") {
            report.rejected.removal("scope");
            continue;
        }
        if let Some(rep) = r.replacement {
            let ok = rep
                .and_then(|i| replacement_keys.get(&i))
                .is_some_and(|key| {
                    facts.iter().any(|f| {
                        f.id != r.id && f.text().and_then(content_key).as_ref() == Some(key)
                    })
                });
            if !ok {
                report.rejected.removal("replacement");
                continue;
            }
        }
        remove_ids.insert(r.id.clone());
    }
    if !remove_ids.is_empty() {
        review::remove_facts(&mut facts, &remove_ids, &mut report.facts_removed);
    }

    // Consolidation after capacity and removals: a source evicted just now is no longer
    // there to merge, so a merge can never drop sources whose replacement is trimmed away.
    let merges: Vec<review::Merge<'_>> = update
        .consolidate
        .iter()
        .map(|c| review::Merge {
            source_ids: &c.source_ids,
            content: &c.fact.content,
            category: &c.fact.category,
            confidence: c.fact.confidence,
            gate: fact_gate(&c.fact),
        })
        .collect();
    let merged = review::apply_consolidation(&mut facts, settings, now_at, &merges, new_fact_id);
    for why in merged.rejected {
        report.rejected.consolidation(why);
    }
    report.consolidated = merged.created;
    report.consolidated_from = merged.consumed;

    // Uploads belong to one thread: scrub them from summaries, drop such facts.
    let scrub = |s: &mut Section| {
        if mentions_upload(&s.summary) {
            s.summary = strip_upload_sentences(&s.summary);
        }
    };
    profile
        .user_sections_mut()
        .into_iter()
        .for_each(|(_, s)| scrub(s));
    profile
        .history_sections_mut()
        .into_iter()
        .for_each(|(_, s)| scrub(s));
    facts.retain(|f| {
        let drop = f.text().is_some_and(mentions_upload);
        if drop {
            report.facts_added.retain(|id| id != &f.id);
            report.consolidated.retain(|id| id != &f.id);
        }
        !drop
    });
    report.signals = signals.iter().map(|s| s.as_str()).collect();
    (profile, facts, report)
}

/// Calls the memory model and writes its changes.
pub struct MemoryUpdater {
    store: SqliteStore,
    settings: MemorySettings,
    model: ModelSource,
    resolved: Mutex<Option<Arc<dyn ChatModel>>>,
    watermarks: Mutex<Watermarks>,
}

impl MemoryUpdater {
    pub(crate) fn new(store: SqliteStore, settings: MemorySettings, model: ModelSource) -> Self {
        MemoryUpdater {
            store,
            settings,
            model,
            resolved: Mutex::new(None),
            watermarks: Mutex::new(Watermarks::default()),
        }
    }

    fn model(&self) -> Result<Arc<dyn ChatModel>, MemoryError> {
        if let Some(m) = self.resolved.lock().ok().and_then(|m| m.clone()) {
            return Ok(m);
        }
        let m = self
            .model
            .resolve()
            .map_err(|e| MemoryError::NoModel(e.to_string()))?;
        if let Ok(mut slot) = self.resolved.lock() {
            *slot = Some(m.clone());
        }
        Ok(m)
    }

    /// Extract and store memory from one queued conversation.
    pub async fn update(&self, item: &QueueItem) -> Result<UpdateReport, MemoryError> {
        let user = user_of(item.user_id.as_deref());
        let bucket = bucket_of(item.agent_name.as_deref());
        let key: WatermarkKey = (item.thread_id.clone(), user.clone(), bucket.clone());
        let feed: &[Arc<Message>] = if item.bypass_watermark {
            &item.messages
        } else {
            let mark = self.watermarks.lock().ok().and_then(|mut w| w.get(&key));
            match mark.and_then(|m| {
                item.messages
                    .iter()
                    .position(|msg| identity(msg).as_deref() == Some(m.as_str()))
            }) {
                Some(i) => &item.messages[i + 1..],
                None => &item.messages,
            }
        };
        if feed.is_empty() {
            return Ok(UpdateReport::default());
        }
        let conversation = format_conversation(feed);
        if conversation.trim().is_empty() {
            return Ok(UpdateReport::default());
        }
        let signals = detect_signals(feed);
        let mut loaded = load(&self.store, &user, &bucket).await?;
        let memory_json = current_memory_json(&loaded.profile, &loaded.facts);
        let has_manual = loaded.facts.iter().any(Fact::is_manual);
        let review_at = chrono::Utc::now();
        let user_part = Arc::new(Message::human(update_user_prompt(
            &memory_json,
            &conversation,
            &signals,
            has_manual,
            &review::staleness_section(&loaded.facts, &self.settings, review_at),
            &review::consolidation_section(&loaded.facts, &self.settings),
        )));
        let model = self.model()?;
        let started = Instant::now();
        let settings = Object::new();
        let message_id = format!("memory--{}", uuid::Uuid::new_v4());
        let reply = model
            .invoke(ChatRequest {
                system: Some(UPDATE_SYSTEM_PROMPT),
                messages: std::slice::from_ref(&user_part),
                tools: &[],
                tool_choice: None,
                settings: &settings,
                message_id: &message_id,
                encodings: None,
            })
            .await?;
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let parsed = parse_update(&reply.content.text())?;

        for _attempt in 0..3 {
            let now = now_iso();
            let (profile, facts, mut report) = apply(
                &self.settings,
                loaded.profile.clone(),
                loaded.facts.clone(),
                &parsed,
                &item.thread_id,
                &signals,
                &now,
            );
            let facts_json = facts
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| MemoryError::Parse(e.to_string()))?;
            let change = MemoryChange {
                profile: Some(
                    serde_json::to_value(&profile)
                        .map_err(|e| MemoryError::Parse(e.to_string()))?,
                ),
                facts: Some(facts_json),
            };
            match self
                .store
                .save_memory(&user, &bucket, loaded.revision, change)
                .await?
            {
                MemorySave::Saved { revision } => {
                    if !item.bypass_watermark {
                        if let Some(id) = item.messages.last().and_then(|m| identity(m)) {
                            if let Ok(mut w) = self.watermarks.lock() {
                                w.set(key, id, self.settings.watermark_max_keys);
                            }
                        }
                    }
                    report.called_model = true;
                    report.revision = revision;
                    report.model = Some(model.info().name.clone());
                    report.usage = reply.usage_metadata.clone();
                    report.latency_ms = latency_ms;
                    return Ok(report);
                }
                MemorySave::Conflict { current } => {
                    tracing::debug!(user, current, "memory revision conflict; recomputing");
                    loaded = load(&self.store, &user, &bucket).await?;
                }
            }
        }
        Err(MemoryError::Conflict(3))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn parsed(extra: Value) -> ParsedUpdate {
        let mut body = json!({"user": {}, "history": {}, "newFacts": []});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        parse_update(&body.to_string()).unwrap()
    }

    #[test]
    fn stale_verdicts_are_normalized() {
        let p = parsed(json!({
            "staleFactsToRemove": [{"id": "a", "reason": "gone"}, {"id": ""}, {"reason": "x"},
                                   "b", {"id": "c", "reason": 3}],
            "staleFactsToExtend": [{"id": "a", "extend_by_days": 365.9},
                                   {"id": "b", "extend_by_days": 0.5},
                                   {"id": "c", "extend_by_days": true},
                                   {"id": "d", "extend_by_days": "30"},
                                   {"id": "e", "extend_by_days": -3},
                                   {"extend_by_days": 10}],
        }));
        let removals: Vec<(&str, &str)> = p
            .stale_remove
            .iter()
            .map(|r| (r.id.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(removals, [("a", "gone"), ("c", "")]);
        let ext: Vec<(&str, i64)> = p
            .stale_extend
            .iter()
            .map(|e| (e.id.as_str(), e.extend_by_days))
            .collect();
        assert_eq!(ext, [("a", 365)]);
    }

    #[test]
    fn consolidations_need_two_distinct_sources_and_content() {
        let p = parsed(json!({"factsToConsolidate": [
            {"sourceIds": ["a", "a"], "consolidated": {"content": "x"}},
            {"sourceIds": ["a", "b"], "consolidated": {"content": "  "}},
            {"sourceIds": ["a", "b"]},
            {"sourceIds": "a,b", "consolidated": {"content": "x"}},
            {"sourceIds": ["a", "", 3, "b", "a"],
             "consolidated": {"content": " merged ", "confidence": true, "category": " ",
                              "scope": "USER", "durability": "durable", "authority": "descriptive"}},
        ]}));
        assert_eq!(p.consolidate.len(), 1);
        let c = &p.consolidate[0];
        assert_eq!(c.source_ids, ["a", "b"]);
        assert_eq!(c.fact.content, "merged");
        assert_eq!(c.fact.category, "context");
        assert_eq!(c.fact.confidence, 0.9);
        assert_eq!(fact_gate(&c.fact), None);
    }

    #[test]
    fn an_unclassified_consolidation_keeps_its_sources_and_is_counted() {
        let mut settings = MemorySettings::default();
        settings.consolidation.enabled = true;
        settings.consolidation.min_facts = 3;
        let facts: Vec<Fact> = (0..3)
            .map(|i| Fact {
                id: format!("f{i}"),
                content: json!(format!("fact {i}")),
                category: Some("preference".into()),
                confidence: json!(0.9),
                created_at: now_iso(),
                ..Default::default()
            })
            .collect();
        let p = parsed(json!({"factsToConsolidate": [
            {"sourceIds": ["f0", "f1"], "consolidated": {"content": "merged", "scope": "thread",
              "durability": "durable", "authority": "descriptive"}},
        ]}));
        let (_, after, report) = apply(
            &settings,
            Profile::default(),
            facts.clone(),
            &p,
            "t",
            &BTreeSet::new(),
            &now_iso(),
        );
        assert_eq!(after, facts);
        assert_eq!(report.rejected.consolidations.get("scope"), Some(&1));
        assert!(report.consolidated.is_empty());
    }
}
