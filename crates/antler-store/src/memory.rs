//! Long-term memory persistence: per-user summaries and per-(user, agent) facts.
//!
//! The shape follows DeerMem's storage (spec 40 §4.7): a per-user profile holding the six summary
//! sections (DeerMem's `memory.json` minus facts) and one record per fact, bucketed by agent
//! (`__default__` for the lead agent). It lives in antler's SQLite file rather than in
//! `{root}/users/{uid}/memory.json` plus one Markdown file per fact because antler's contract puts
//! memory in the embedded database (CONTRACT "Files and folders"), and because one transaction
//! gives what DeerMem builds from temp files, renames, directory syncs and per-scope file locks:
//! summaries and facts change together or not at all (a full disk leaves no half-written
//! memory), and several `antler` processes may update one user's memory concurrently.
//!
//! The store treats summaries and facts as opaque JSON documents (the memory system in
//! `antler-agent` owns their schema). Every change to a user's memory bumps the profile's
//! `revision`; [`SqliteStore::save_memory`] writes only if the revision is still the one the
//! caller loaded (optimistic concurrency: on a conflict the updater reloads and recomputes).

use rusqlite::params;
use serde_json::Value;

use crate::db::Cx;
use crate::error::StoreError;
use crate::{now, SqliteStore};

/// One user's memory as loaded for one agent bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemorySnapshot {
    pub user_id: String,
    /// The fact bucket (`__default__` or a lowercased agent name).
    pub agent: String,
    /// 0 when the user has no stored memory.
    pub revision: i64,
    /// The summaries document (`{"user": {...}, "history": {...}}`), `Null` when none.
    pub profile: Value,
    /// The bucket's facts, oldest first.
    pub facts: Vec<Value>,
    /// RFC 3339 UTC of the last change; `None` when nothing is stored.
    pub updated_at: Option<String>,
}

/// What [`SqliteStore::save_memory`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySave {
    /// Written; the user's memory is now at this revision.
    Saved { revision: i64 },
    /// Someone else changed the memory since it was loaded; nothing was written.
    Conflict { current: i64 },
}

/// A change to one user's memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryChange {
    /// Replace the summaries document.
    pub profile: Option<Value>,
    /// Replace the bucket's facts (each needs a string `id`).
    pub facts: Option<Vec<Value>>,
}

fn valid_fact_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn revision_tx(cx: &Cx<'_>, user: &str) -> Result<Option<(i64, String, String)>, StoreError> {
    cx.query_opt(
        "SELECT revision, doc, updated_at FROM memory_profiles WHERE user_id = ?1",
        [user],
        "read memory",
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

fn load_tx(cx: &Cx<'_>, user: &str, agent: &str) -> Result<MemorySnapshot, StoreError> {
    let corrupt = |what: String, e: serde_json::Error| StoreError::Corrupt {
        what,
        cause: e.to_string(),
    };
    let (revision, profile, updated_at) = match revision_tx(cx, user)? {
        Some((rev, doc, at)) => (
            rev,
            serde_json::from_str(&doc)
                .map_err(|e| corrupt(format!("memory summaries of user {user}"), e))?,
            Some(at),
        ),
        None => (0, Value::Null, None),
    };
    let rows: Vec<(String, String)> = cx.query_all(
        "SELECT fact_id, body FROM memory_facts WHERE user_id = ?1 AND agent_name = ?2
         ORDER BY rowid",
        params![user, agent],
        "read memory facts",
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut facts = Vec::new();
    for (id, body) in rows {
        facts.push(
            serde_json::from_str(&body)
                .map_err(|e| corrupt(format!("memory fact {id} of user {user}"), e))?,
        );
    }
    Ok(MemorySnapshot {
        user_id: user.to_owned(),
        agent: agent.to_owned(),
        revision,
        profile,
        facts,
        updated_at,
    })
}

/// Bump (or create) the user's profile row; `doc` replaces the summaries when given.
fn bump_tx(cx: &Cx<'_>, user: &str, doc: Option<&str>) -> Result<i64, StoreError> {
    let ts = now();
    cx.exec(
        "INSERT INTO memory_profiles (user_id, revision, doc, updated_at)
         VALUES (?1, 1, COALESCE(?2, '{}'), ?3)
         ON CONFLICT (user_id) DO UPDATE SET revision = revision + 1,
           doc = COALESCE(?2, doc), updated_at = ?3",
        params![user, doc, ts],
        "write memory",
    )?;
    Ok(revision_tx(cx, user)?.map_or(0, |(r, _, _)| r))
}

impl SqliteStore {
    /// The user's summaries and the facts of one agent bucket.
    pub async fn load_memory(
        &self,
        user_id: &str,
        agent: &str,
    ) -> Result<MemorySnapshot, StoreError> {
        let user = user_id.to_owned();
        let agent = agent.to_owned();
        self.db().read(move |cx| load_tx(cx, &user, &agent)).await
    }

    /// Write a change to a user's memory if its revision is still `expected_revision` (0 = the
    /// user had none). Summaries and facts are written in one transaction.
    pub async fn save_memory(
        &self,
        user_id: &str,
        agent: &str,
        expected_revision: i64,
        change: MemoryChange,
    ) -> Result<MemorySave, StoreError> {
        let doc = change
            .profile
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::encode("memory summaries", e))?;
        let facts = change
            .facts
            .map(|facts| {
                facts
                    .into_iter()
                    .map(|f| {
                        let id = f
                            .get("id")
                            .and_then(Value::as_str)
                            .filter(|id| valid_fact_id(id))
                            .ok_or_else(|| {
                                StoreError::encode(
                                    "memory fact",
                                    "a fact needs an `id` of letters, digits, '_' or '-'",
                                )
                            })?
                            .to_owned();
                        let body = serde_json::to_string(&f)
                            .map_err(|e| StoreError::encode(format!("memory fact {id}"), e))?;
                        Ok((id, body))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
            })
            .transpose()?;
        let user = user_id.to_owned();
        let agent = agent.to_owned();
        self.db()
            .write(move |cx| {
                let current = revision_tx(cx, &user)?.map_or(0, |(r, _, _)| r);
                if current != expected_revision {
                    return Ok(MemorySave::Conflict { current });
                }
                if let Some(facts) = &facts {
                    cx.exec(
                        "DELETE FROM memory_facts WHERE user_id = ?1 AND agent_name = ?2",
                        params![user, agent],
                        "write memory facts",
                    )?;
                    for (id, body) in facts {
                        cx.exec(
                            "INSERT INTO memory_facts (user_id, agent_name, fact_id, body)
                             VALUES (?1, ?2, ?3, ?4)",
                            params![user, agent, id, body],
                            "write memory facts",
                        )?;
                    }
                }
                let revision = bump_tx(cx, &user, doc.as_deref())?;
                Ok(MemorySave::Saved { revision })
            })
            .await
    }

    /// Forget a user's memory: everything (`agent` = `None`) or one bucket's facts. Returns how
    /// many facts were removed.
    pub async fn clear_memory(
        &self,
        user_id: &str,
        agent: Option<&str>,
    ) -> Result<usize, StoreError> {
        let user = user_id.to_owned();
        let agent = agent.map(str::to_owned);
        self.db()
            .write(move |cx| {
                let n = cx.exec(
                    "DELETE FROM memory_facts WHERE user_id = ?1
                       AND (?2 IS NULL OR agent_name = ?2)",
                    params![user, agent],
                    "clear memory",
                )?;
                match agent {
                    None => {
                        cx.exec(
                            "DELETE FROM memory_profiles WHERE user_id = ?1",
                            [&user],
                            "clear memory",
                        )?;
                    }
                    Some(_) if n > 0 => {
                        bump_tx(cx, &user, None)?;
                    }
                    Some(_) => {}
                }
                Ok(n)
            })
            .await
    }

    /// Users with stored memory, sorted.
    pub async fn memory_users(&self) -> Result<Vec<String>, StoreError> {
        self.db()
            .read(|cx| {
                cx.query_all(
                    "SELECT user_id FROM memory_profiles UNION SELECT user_id FROM memory_facts
                     ORDER BY 1",
                    [],
                    "list memory users",
                    |r| r.get(0),
                )
            })
            .await
    }

    /// The fact buckets (agent names) a user has, sorted.
    pub async fn memory_buckets(&self, user_id: &str) -> Result<Vec<String>, StoreError> {
        let user = user_id.to_owned();
        self.db()
            .read(move |cx| {
                cx.query_all(
                    "SELECT DISTINCT agent_name FROM memory_facts WHERE user_id = ?1 ORDER BY 1",
                    [&user],
                    "list memory buckets",
                    |r| r.get(0),
                )
            })
            .await
    }
}
