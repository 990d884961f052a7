//! DeerFlow's per-key reducers as plain functions (spec 10 §4.3). `existing` is the current
//! value (`None` = missing or null), `new` the write.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::state::{Delegation, Promoted, ReducerError, SandboxState, SkillEntry};

/// Ordered set union: keep the first occurrence of each path.
pub fn merge_artifacts(existing: Option<Vec<String>>, new: Option<Vec<String>>) -> Vec<String> {
    match (existing, new) {
        (None, new) => new.unwrap_or_default(),
        (Some(existing), None) => existing,
        (Some(existing), Some(new)) => {
            let mut seen: HashSet<String> = HashSet::with_capacity(existing.len() + new.len());
            existing
                .into_iter()
                .chain(new)
                .filter(|p| seen.insert(p.clone()))
                .collect()
        }
    }
}

/// Map merge, `new` wins per key; an empty `new` map clears everything.
pub fn merge_viewed_images(
    existing: Option<Map<String, Value>>,
    new: Option<Map<String, Value>>,
) -> Map<String, Value> {
    match (existing, new) {
        (None, new) => new.unwrap_or_default(),
        (Some(existing), None) => existing,
        (Some(_), Some(new)) if new.is_empty() => Map::new(),
        (Some(mut existing), Some(new)) => {
            existing.extend(new);
            existing
        }
    }
}

/// Idempotent, fail-closed: the same sandbox id may be written any number of times; two
/// different ids in one thread are an isolation bug.
pub fn merge_sandbox(
    existing: Option<SandboxState>,
    new: Option<SandboxState>,
) -> Result<Option<SandboxState>, ReducerError> {
    match (existing, new) {
        (existing, None) => Ok(existing),
        (None, new) => Ok(new),
        (Some(existing), Some(new)) => {
            if existing.sandbox_id == new.sandbox_id {
                Ok(Some(existing))
            } else {
                let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "None".to_owned());
                Err(ReducerError::SandboxConflict(
                    show(&existing.sandbox_id),
                    show(&new.sandbox_id),
                ))
            }
        }
    }
}

/// Last non-null wins (`todos`, `goal`): a null write never wipes the value; `[]` is a clear.
pub fn merge_todos<T>(existing: Option<T>, new: Option<T>) -> Option<T> {
    match new {
        None => existing,
        some => some,
    }
}

fn dedupe(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = HashSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// Union scoped by catalog hash; a different (or missing) hash replaces wholesale.
pub fn merge_promoted(existing: Option<Promoted>, new: Option<Promoted>) -> Option<Promoted> {
    let Some(new) = new else { return existing };
    if new == Promoted::default() {
        return existing;
    }
    match existing {
        Some(existing)
            if existing.catalog_hash.is_some() && existing.catalog_hash == new.catalog_hash =>
        {
            Some(Promoted {
                catalog_hash: new.catalog_hash,
                names: dedupe(existing.names.into_iter().chain(new.names)),
            })
        }
        _ => Some(Promoted {
            catalog_hash: new.catalog_hash,
            names: dedupe(new.names),
        }),
    }
}

/// Maximum delegation ledger length.
pub const MAX_DELEGATIONS: usize = 50;

/// Ledger keyed by id: latest wins, terminal never downgraded, `created_at`/`run_id` inherited,
/// first-seen order, capped to the most recent 50.
pub fn merge_delegations(
    existing: Option<Vec<Delegation>>,
    new: Option<Vec<Delegation>>,
) -> Vec<Delegation> {
    let existing = existing.unwrap_or_default();
    let new = match new {
        Some(n) if !n.is_empty() => n,
        _ => return existing,
    };
    let mut by_id: HashMap<String, Delegation> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for mut entry in existing.into_iter().chain(new) {
        if let Some(prev) = by_id.get(&entry.id) {
            if prev.is_terminal() && !entry.is_terminal() {
                continue;
            }
            if prev.created_at.is_some() {
                entry.created_at = prev.created_at.clone();
            }
            if prev.run_id.is_some() && entry.run_id.is_none() {
                entry.run_id = prev.run_id.clone();
            }
        } else {
            order.push(entry.id.clone());
        }
        by_id.insert(entry.id.clone(), entry);
    }
    let mut out: Vec<Delegation> = order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .collect();
    if out.len() > MAX_DELEGATIONS {
        out.drain(..out.len() - MAX_DELEGATIONS);
    }
    out
}

/// Maximum skill references kept.
pub const MAX_SKILL_CONTEXT: usize = 8;
/// Maximum description length of a skill reference.
pub const MAX_SKILL_DESCRIPTION: usize = 500;

fn normalize_skill(mut e: SkillEntry) -> SkillEntry {
    let collapsed = e
        .description
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    e.description = collapsed.chars().take(MAX_SKILL_DESCRIPTION).collect();
    e
}

/// Recency-ordered by path, capped to the last 8.
pub fn merge_skill_context(
    existing: Option<Vec<SkillEntry>>,
    new: Option<Vec<SkillEntry>>,
) -> Vec<SkillEntry> {
    let mut list: Vec<SkillEntry> = existing
        .unwrap_or_default()
        .into_iter()
        .map(normalize_skill)
        .collect();
    let new = match new {
        Some(n) if !n.is_empty() => n,
        _ => return list,
    };
    for entry in new {
        let entry = normalize_skill(entry);
        list.retain(|e| e.path != entry.path);
        list.push(entry);
    }
    if list.len() > MAX_SKILL_CONTEXT {
        list.drain(..list.len() - MAX_SKILL_CONTEXT);
    }
    list
}

#[cfg(test)]
#[path = "reducers_tests.rs"]
mod tests;
