//! The thread message feed the UI renders history from (`GET /threads/{id}/messages/page`, spec
//! 70 §3.4 G9), behind the [`MessageFeed`] trait so the run journal can replace the default.
//!
//! [`CheckpointFeed`] derives the feed from the thread's latest checkpoint: every user input,
//! lead-agent AI message and tool result in state order, numbered 1, 2, … — ids are the state's
//! own, so live stream copies and persisted rows merge in the UI. It is as durable as the
//! checkpoint (written before a run's `end`), but it costs a state load per page and its `seq`
//! shifts if summarization removes messages; the journal (`run_events`) gives stable sequence
//! numbers and O(page) reads.

use std::collections::HashMap;

use antler_protocol::Message;
use antler_store::{RunRecord, SqliteStore};
use async_trait::async_trait;
use serde_json::{json, Value};

use crate::wire;

/// One backward page, rows ascending by `seq`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FeedPage {
    /// `{thread_id, run_id, seq, event_type, category, content, metadata, created_at, feedback}`.
    pub data: Vec<Value>,
    /// Older rows exist before `data[0]`.
    pub has_more: bool,
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("message feed unavailable: {0}")]
    Unavailable(String),
}

/// A thread's persisted message journal, read backwards.
#[async_trait]
pub trait MessageFeed: Send + Sync {
    /// Up to `limit` rows with `seq < before_seq` (all when `None`), the newest of them, in
    /// ascending order. An unknown thread is an empty page.
    async fn page(
        &self,
        thread_id: &str,
        limit: usize,
        before_seq: Option<i64>,
    ) -> Result<FeedPage, FeedError>;
}

/// Seconds each finished run took (`updated_at − created_at`), by run id.
pub fn run_durations(runs: &[RunRecord]) -> HashMap<String, i64> {
    let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
    runs.iter()
        .filter(|r| r.status.is_terminal())
        .filter_map(|r| {
            let (c, u) = (parse(&r.created_at)?, parse(&r.updated_at)?);
            Some((r.run_id.clone(), (u - c).num_seconds().max(0)))
        })
        .collect()
}

/// Whether a message is part of the visible conversation journal.
fn journaled(m: &Message) -> bool {
    match m {
        Message::Human(h) => {
            h.name.as_deref() != Some(antler_protocol::markers::SUMMARY)
                && (!m.is_hidden() || h.additional_kwargs.contains_key("human_input_response"))
        }
        Message::Ai(_) | Message::Tool(_) => true,
        Message::System(_) | Message::Remove(_) => false,
    }
}

/// The feed derived from checkpoints (see the module docs).
pub struct CheckpointFeed {
    store: SqliteStore,
}

impl CheckpointFeed {
    pub fn new(store: SqliteStore) -> Self {
        CheckpointFeed { store }
    }
}

#[async_trait]
impl MessageFeed for CheckpointFeed {
    async fn page(
        &self,
        thread_id: &str,
        limit: usize,
        before_seq: Option<i64>,
    ) -> Result<FeedPage, FeedError> {
        let unavailable = |e: antler_store::StoreError| FeedError::Unavailable(e.to_string());
        let Some(cp) = self
            .store
            .latest_checkpoint(thread_id)
            .await
            .map_err(unavailable)?
        else {
            return Ok(FeedPage::default());
        };
        let runs = self
            .store
            .list_runs(thread_id, 100_000)
            .await
            .map_err(unavailable)?;
        let durations = run_durations(&runs);
        let fallback_ts = wire::iso(&cp.meta.created_at);

        let mut rows: Vec<Value> = Vec::new();
        let mut run_id: Option<String> = None;
        let mut run_ts: Option<String> = None;
        for m in cp.state.messages.iter().filter(|m| journaled(m)) {
            let mut content = wire::message_value(m);
            let event_type = match m {
                Message::Human(h) => {
                    run_id = h
                        .additional_kwargs
                        .get("run_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    run_ts = h
                        .additional_kwargs
                        .get("timestamp")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    // The user's own words, without server-injected context.
                    if let Some(orig) = h
                        .additional_kwargs
                        .get(antler_protocol::markers::ORIGINAL_USER_CONTENT)
                    {
                        if orig.is_string() || orig.is_array() {
                            content["content"] = orig.clone();
                        }
                    }
                    "llm.human.input"
                }
                Message::Ai(_) => "llm.ai.response",
                _ => "llm.tool.result",
            };
            rows.push(json!({
                "thread_id": thread_id,
                "run_id": run_id,
                "seq": rows.len() + 1,
                "event_type": event_type,
                "category": "message",
                "content": content,
                "metadata": {"caller": "lead_agent"},
                "created_at": run_ts.clone().unwrap_or_else(|| fallback_ts.clone()),
                "feedback": null,
            }));
        }
        // turn_duration on each finished run's last AI row.
        let mut stamped = std::collections::HashSet::new();
        for row in rows.iter_mut().rev() {
            let Some(rid) = row["run_id"].as_str().map(str::to_owned) else {
                continue;
            };
            if row["content"]["type"] != "ai" || stamped.contains(&rid) {
                continue;
            }
            if let Some(d) = durations.get(&rid) {
                if let Some(kw) = row["content"]["additional_kwargs"].as_object_mut() {
                    kw.insert("turn_duration".into(), json!(d));
                }
                stamped.insert(rid);
            }
        }

        let end = match before_seq {
            Some(b) => usize::try_from(b.saturating_sub(1).max(0))
                .unwrap_or(0)
                .min(rows.len()),
            None => rows.len(),
        };
        let start = end.saturating_sub(limit);
        Ok(FeedPage {
            has_more: start > 0,
            data: rows.drain(start..end).collect(),
        })
    }
}
