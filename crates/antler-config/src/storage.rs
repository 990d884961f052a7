//! Persistence and streaming sections: `checkpointer`, `database`, `run_events`,
//! `stream_bridge` (spec 60 §20–§22). Restart-only.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::de::section;

/// Store kind of the deprecated `checkpointer` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointerType {
    /// In-process.
    Memory,
    /// SQLite file.
    Sqlite,
    /// Postgres.
    Postgres,
}

/// `checkpointer` (deprecated): when present it wins for the graph checkpointer/store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointerConfig {
    /// Required when the section is present.
    #[serde(rename = "type")]
    pub kind: CheckpointerType,
    /// sqlite: file (default `store.db`); postgres: required URL.
    #[serde(default)]
    pub connection_string: Option<String>,
    /// Plain identifier or "".
    #[serde(default)]
    pub postgres_schema: String,
}

/// `database.backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseBackend {
    /// In-process (nothing survives a restart).
    Memory,
    /// One SQLite file (WAL).
    Sqlite,
    /// Postgres at `postgres_url`.
    Postgres,
}

/// `database.checkpoint_channel_mode` (EXTRA).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointChannelMode {
    /// Whole channel values per checkpoint.
    #[default]
    Full,
    /// Deltas with periodic snapshots.
    Delta,
}

section! {
    plain:
    /// `database.checkpoint_delta` (EXTRA).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct CheckpointDeltaConfig {
        /// Full snapshot every N checkpoints.
        pub snapshot_frequency: u64 = 10,
    }
}

section! {
    plain:
    /// `database.checkpoint_graph_cache` (EXTRA).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct CheckpointGraphCacheConfig {
        /// Cached accessor graphs.
        pub accessor_graph_max: u64 = 64,
    }
}

section! {
    plain:
    /// `database` (§20): application data and (unless `checkpointer` is set) checkpoints.
    ///
    /// [`DatabaseConfig::default`] is what applies when the section is absent or null: `sqlite`
    /// (DeerFlow's loader fills that in). A section that is present but omits `backend` gets
    /// DeerFlow's code default, `memory`.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct DatabaseConfig {
        /// `memory` | `sqlite` | `postgres`.
        #[serde(default = "memory_backend")]
        pub backend: DatabaseBackend = DatabaseBackend::Sqlite,
        /// Directory of the SQLite file. null (antler) = the data home (`$ANTLER_HOME`, default
        /// `./.antler`); DeerFlow's default is `.deer-flow/data`.
        #[serde(default)]
        pub sqlite_dir: Option<String> = None,
        /// e.g. `$DATABASE_URL`.
        #[serde(default)]
        pub postgres_url: String = String::new(),
        /// Plain identifier; created at startup.
        #[serde(default)]
        pub postgres_schema: String = String::new(),
        /// `full` | `delta` (EXTRA).
        #[serde(default)]
        pub checkpoint_channel_mode: CheckpointChannelMode = CheckpointChannelMode::Full,
        /// Delta mode options (EXTRA).
        #[serde(default, deserialize_with = "crate::de::null_default")]
        pub checkpoint_delta: CheckpointDeltaConfig = CheckpointDeltaConfig::default(),
        /// (EXTRA).
        #[serde(default, deserialize_with = "crate::de::null_default")]
        pub checkpoint_graph_cache: CheckpointGraphCacheConfig = CheckpointGraphCacheConfig::default(),
        /// Checkpoint cache options, kept as written (EXTRA).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub checkpoint_cache: Option<Value> = None,
        /// Log SQL (EXTRA, postgres).
        #[serde(default)]
        pub echo_sql: bool = false,
        /// Connection pool size (EXTRA, postgres).
        #[serde(default = "d_pool_size")]
        pub pool_size: u32 = d_pool_size(),
        /// Seconds before a pooled connection is recycled (> 0) (EXTRA, postgres).
        #[serde(default = "d_pool_recycle")]
        pub pool_recycle: f64 = d_pool_recycle(),
        /// Statement timeout in seconds (> 0 or null) (EXTRA, postgres).
        #[serde(default = "d_command_timeout")]
        pub command_timeout: Option<f64> = d_command_timeout(),
    }
}

fn memory_backend() -> DatabaseBackend {
    DatabaseBackend::Memory
}
fn d_pool_size() -> u32 {
    5
}
fn d_pool_recycle() -> f64 {
    300.0
}
fn d_command_timeout() -> Option<f64> {
    Some(30.0)
}

/// `run_events.backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunEventsBackend {
    /// In-process.
    #[default]
    Memory,
    /// The SQL database.
    Db,
    /// Append-only JSONL files.
    Jsonl,
}

section! {
    /// `run_events` (§21): the run journal.
    pub struct RunEventsConfig {
        /// `memory` | `db` | `jsonl`.
        pub backend: RunEventsBackend = RunEventsBackend::Memory,
        /// Bytes kept per trace payload (db backend).
        pub max_trace_content: u64 = 10_240,
        /// Accumulate token counts onto the run record.
        pub track_token_usage: bool = true,
    }
}

/// `stream_bridge.type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamBridgeType {
    /// Single process.
    #[default]
    Memory,
    /// Redis Streams (fail-hard).
    Redis,
}

section! {
    /// `stream_bridge` (§22): how run events reach streaming clients.
    pub struct StreamBridgeConfig {
        /// `memory` | `redis`.
        #[serde(rename = "type")]
        pub kind: StreamBridgeType = StreamBridgeType::Memory,
        /// null → `$DEER_FLOW_STREAM_BRIDGE_REDIS_URL`, `$REDIS_URL`, `redis://localhost:6379/0`.
        pub redis_url: Option<String> = None,
        /// Events retained per run.
        pub queue_maxsize: u64 = 256,
        /// Redis pool cap.
        pub max_connections: Option<u64> = None,
        /// Rolling TTL on retained streams.
        pub stream_ttl_seconds: u64 = 86_400,
        /// Delay before recovered streams are cleaned up.
        pub recovered_stream_cleanup_delay_seconds: f64 = 60.0,
    }
}
