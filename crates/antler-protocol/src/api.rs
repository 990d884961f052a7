//! Request bodies of the HTTP API (spec 70 §3.1–3.2, the run-create body of §4.1 and the
//! gateway's memory routes), as the server parses them. Field names are the LangGraph Platform's and DeerFlow's;
//! every field is optional unless the spec requires it, and a wrong type is a 422 naming the
//! field (the server's `Body` extractor).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::checkpoint::MultitaskStrategy;

/// `POST /threads`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateThread {
    pub thread_id: Option<String>,
    pub metadata: Option<Map<String, Value>>,
    /// `raise` or `do_nothing` (default).
    pub if_exists: Option<String>,
    /// Not supported: non-empty → 422.
    pub supersteps: Option<Vec<Value>>,
}

/// `POST /threads/search`. Unknown fields are refused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchThreads {
    pub metadata: Option<Map<String, Value>>,
    pub ids: Option<Vec<String>>,
    pub status: Option<String>,
    /// Accepted, not filtered on.
    pub values: Option<Value>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub sort_by: Option<String>,
    pub sort_order: Option<String>,
    /// Accepted, ignored.
    pub select: Option<Value>,
    /// Accepted, ignored.
    pub extract: Option<Value>,
}

/// `PATCH /threads/{id}`: metadata to merge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PatchThread {
    pub metadata: Option<Map<String, Value>>,
}

/// `POST /threads/{id}/state`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateState {
    /// The channels to replace (an object; checked by the route).
    pub values: Option<Value>,
    pub as_node: Option<String>,
    /// `{checkpoint_id}` to fork from.
    pub checkpoint: Option<Value>,
    pub checkpoint_id: Option<String>,
}

/// `POST /threads/{id}/history`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryQuery {
    pub limit: Option<i64>,
    /// A checkpoint id, or `{checkpoint_id}` (the Python SDK sends either).
    pub before: Option<Value>,
    pub metadata: Option<Map<String, Value>>,
    pub checkpoint: Option<Value>,
}

/// `POST /assistants/search`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchAssistants {
    pub graph_id: Option<String>,
    pub name: Option<String>,
    pub metadata: Option<Map<String, Value>>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

/// `POST /memory/facts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewFact {
    pub content: String,
    #[serde(default = "default_category")]
    pub category: String,
    #[serde(default = "default_confidence")]
    pub confidence: f64,
}

fn default_category() -> String {
    "context".to_owned()
}

fn default_confidence() -> f64 {
    0.5
}

/// `PATCH /memory/facts/{id}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FactPatch {
    pub content: Option<String>,
    pub category: Option<String>,
    pub confidence: Option<f64>,
}

/// A run-create body (`POST /threads/{id}/runs[/stream|/wait]`, `POST /runs[/stream|/wait]`;
/// spec 70 §4.1), as typed as the wire allows. `null` reads as absent everywhere. Fields the
/// server does not support keep their wire type so it can refuse them by name (422); anything
/// not listed lands in [`RunCreate::unknown`] (also 422, all names at once).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCreate {
    pub assistant_id: Option<String>,
    /// `{messages?, <channel>?…}`; messages and channels are checked by the server.
    pub input: Option<Value>,
    /// `{resume?, update?, goto?}`: only `resume` is supported.
    pub command: Option<Map<String, Value>>,
    pub config: Option<Map<String, Value>>,
    pub context: Option<Map<String, Value>>,
    pub metadata: Option<Map<String, Value>>,
    pub stream_mode: Option<OneOrMany>,
    pub stream_subgraphs: Option<bool>,
    pub stream_resumable: Option<bool>,
    pub checkpoint_during: Option<bool>,
    pub on_disconnect: Option<OnDisconnect>,
    pub multitask_strategy: Option<MultitaskStrategy>,
    /// Fork point: `{thread_id?, checkpoint_id?, checkpoint_ns?…}`.
    pub checkpoint: Option<CheckpointRef>,
    pub checkpoint_id: Option<String>,
    /// Only an empty list is supported.
    pub interrupt_before: Option<Vec<Value>>,
    /// Only an empty list is supported.
    pub interrupt_after: Option<Vec<Value>>,
    pub if_not_exists: Option<IfNotExists>,
    /// Only `keep` is supported.
    pub on_completion: Option<OnCompletion>,
    /// Only `false` is supported.
    pub strict_resume: Option<bool>,
    /// Accepted, ignored (the Python SDK sends them).
    pub durability: Option<Value>,
    pub langsmith_tracer: Option<Value>,
    pub feedback_keys: Option<Value>,
    /// Not supported when set.
    pub webhook: Option<Value>,
    pub after_seconds: Option<Value>,
    pub subgraphs: Option<Value>,
    pub kwargs: Option<Value>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub unknown: Map<String, Value>,
}

impl RunCreate {
    /// The fields set in the body that the server refuses as unsupported, in wire order.
    pub fn unsupported(&self) -> Option<&'static str> {
        let set = [
            ("webhook", self.webhook.is_some()),
            ("after_seconds", self.after_seconds.is_some()),
            ("subgraphs", self.subgraphs.is_some()),
            ("kwargs", self.kwargs.is_some()),
            (
                "on_completion",
                self.on_completion == Some(OnCompletion::Delete),
            ),
            ("strict_resume", self.strict_resume == Some(true)),
            (
                "interrupt_before",
                self.interrupt_before
                    .as_ref()
                    .is_some_and(|v| !v.is_empty()),
            ),
            (
                "interrupt_after",
                self.interrupt_after.as_ref().is_some_and(|v| !v.is_empty()),
            ),
        ];
        set.into_iter().find(|(_, on)| *on).map(|(name, _)| name)
    }
}

/// A string or a list of strings (`stream_mode`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            OneOrMany::One(s) => (Some(s.as_str()), &[][..]),
            OneOrMany::Many(v) => (None, v.as_slice()),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }
}

/// What happens when the creating client disconnects (spec 70 §4.11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDisconnect {
    #[default]
    Cancel,
    Continue,
}

/// A run on a thread that does not exist: refuse (404, default) or create it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IfNotExists {
    #[default]
    Reject,
    Create,
}

/// What becomes of a stateless run's thread when it finishes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnCompletion {
    #[default]
    Keep,
    Delete,
}

/// A checkpoint named in a run body; other keys (`checkpoint_ns`, …) are accepted and ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRef {
    pub thread_id: Option<String>,
    pub checkpoint_id: Option<String>,
}
