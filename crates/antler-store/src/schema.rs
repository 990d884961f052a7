//! Schema and migrations, keyed by `PRAGMA user_version`.
//!
//! `MIGRATIONS[i]` moves the schema from version `i` to `i + 1`. Each runs in its own
//! `BEGIN IMMEDIATE` transaction together with the version bump, so a crash mid-migration leaves
//! the previous version intact, and two processes opening the same file never migrate twice.
//! Append new migrations; never edit a released one.
//!
//! Checkpoint storage is temporal: `checkpoint_messages` keeps one row per message *version*,
//! valid for checkpoint sequence numbers `from_seq <= s < to_seq` (`to_seq` NULL = still live).
//! A step that appends one message writes one checkpoint row and one message row, whatever the
//! history length; any checkpoint loads with one range scan.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::StoreError;

const V1: &str = r#"
CREATE TABLE threads (
    thread_id   TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL DEFAULT 'idle',
    title       TEXT,
    owner       TEXT
);
CREATE INDEX threads_by_updated ON threads (updated_at DESC);
CREATE INDEX threads_by_owner ON threads (owner, updated_at DESC);

-- One row per checkpoint. `seq` orders a thread's checkpoints (1, 2, ...). `fields` holds the
-- non-message channels when they changed at this checkpoint; `fields_seq` names the checkpoint
-- whose `fields` are current here (NULL: default state).
CREATE TABLE checkpoints (
    id            INTEGER PRIMARY KEY,
    thread_id     TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    checkpoint_id TEXT NOT NULL UNIQUE,
    parent_id     TEXT,
    step          INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    metadata      TEXT NOT NULL,
    fields        TEXT,
    fields_seq    INTEGER,
    UNIQUE (thread_id, seq)
);

-- One row per message version: the body at position `ord`, valid from checkpoint `from_seq`
-- until `to_seq` (exclusive; NULL while live).
CREATE TABLE checkpoint_messages (
    id        INTEGER PRIMARY KEY,
    thread_id TEXT NOT NULL,
    ord       INTEGER NOT NULL,
    from_seq  INTEGER NOT NULL,
    to_seq    INTEGER,
    body      TEXT NOT NULL,
    UNIQUE (thread_id, ord, from_seq),
    FOREIGN KEY (thread_id, from_seq) REFERENCES checkpoints (thread_id, seq) ON DELETE CASCADE
);
-- The head's message list (and the rows a write closes).
CREATE INDEX checkpoint_messages_live ON checkpoint_messages (thread_id, ord)
    WHERE to_seq IS NULL;

CREATE TABLE runs (
    run_id              TEXT PRIMARY KEY,
    thread_id           TEXT NOT NULL,
    assistant_id        TEXT NOT NULL,
    status              TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    error               TEXT,
    stop_reason         TEXT,
    metadata            TEXT NOT NULL DEFAULT '{}',
    kwargs              TEXT NOT NULL DEFAULT '{}',
    multitask_strategy  TEXT NOT NULL,
    total_input_tokens  INTEGER NOT NULL DEFAULT 0,
    total_output_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens        INTEGER NOT NULL DEFAULT 0,
    llm_call_count      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_thread ON runs (thread_id, created_at DESC);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('pending', 'running');
"#;

/// Version 2: the run journal (`run_events`), run leases and lifecycle timestamps, long-term
/// memory (`memory_profiles`, `memory_facts`).
///
/// `run_events.seq` is strictly increasing per thread (unique with the thread); it is assigned
/// inside the writer's transaction, so concurrent processes never collide. `content_json` says
/// whether `content` holds JSON (1) or a plain string (0).
///
/// A run's lease (`lease_owner`, `lease_expires_at` in Unix milliseconds) says which process
/// drives it and until when; a `pending`/`running` row whose lease expired or whose owner
/// process is gone is an orphan any process may reclaim.
const V2: &str = r#"
ALTER TABLE runs ADD COLUMN started_at TEXT;
ALTER TABLE runs ADD COLUMN ended_at TEXT;
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at INTEGER;
CREATE INDEX runs_active_by_thread ON runs (thread_id, created_at)
    WHERE status IN ('pending', 'running');

CREATE TABLE run_events (
    id           INTEGER PRIMARY KEY,
    thread_id    TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    user_id      TEXT,
    seq          INTEGER NOT NULL,
    event_type   TEXT NOT NULL,
    category     TEXT NOT NULL,
    content      TEXT NOT NULL,
    content_json INTEGER NOT NULL DEFAULT 0,
    metadata     TEXT NOT NULL DEFAULT '{}',
    created_at   TEXT NOT NULL,
    UNIQUE (thread_id, seq)
);
CREATE INDEX run_events_by_run ON run_events (run_id, seq);
CREATE INDEX run_events_messages ON run_events (thread_id, seq) WHERE category = 'message';

-- Per-user summaries (DeerMem's memory.json minus facts) with an optimistic revision that every
-- change of the user's memory (summaries or any bucket's facts) bumps.
CREATE TABLE memory_profiles (
    user_id    TEXT PRIMARY KEY,
    revision   INTEGER NOT NULL,
    doc        TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- One row per fact, bucketed by (user, agent); `body` is the fact's JSON document.
CREATE TABLE memory_facts (
    user_id    TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    fact_id    TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (user_id, agent_name, fact_id)
);
"#;

/// Version 3: fewer B-trees written per step. The partial index on live message rows cost every
/// checkpoint write a page of its own (an insert for each new row, a delete for each row token
/// usage's stamp closes); the unique index on (thread, position, version) serves the same
/// reads, in `ord` order, at the price of also stepping over closed versions — one to three per
/// position. `run_events_messages` likewise: the unique (thread, seq) index serves the message
/// listing, filtering the thread's other events.
const V3: &str = r#"
DROP INDEX checkpoint_messages_live;
DROP INDEX run_events_messages;
"#;

/// Every migration, in order. The schema version after all of them is `MIGRATIONS.len()`.
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2, V3];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn user_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| StoreError::open(path, &e))
}

/// Bring the schema up to [`SCHEMA_VERSION`]; refuse a newer one.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let newer = |found| StoreError::NewerSchema {
        path: path.to_path_buf(),
        found,
        known: SCHEMA_VERSION,
    };
    let current = user_version(conn, path)?;
    if current > SCHEMA_VERSION {
        return Err(newer(current));
    }
    for (from, sql) in (0_i64..).zip(MIGRATIONS) {
        if from < current {
            continue;
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| StoreError::open(path, &e))?;
        // Another process may have migrated while we waited for the write lock.
        let now = user_version(&tx, path)?;
        if now > SCHEMA_VERSION {
            return Err(newer(now));
        }
        if now > from {
            continue;
        }
        tx.execute_batch(sql)
            .and_then(|()| tx.pragma_update(None, "user_version", from + 1))
            .and_then(|()| tx.commit())
            .map_err(|e| StoreError::open(path, &e))?;
        tracing::info!(path = %path.display(), version = from + 1, "migrated database schema");
    }
    Ok(())
}
