//! Request bodies of the HTTP API's non-run routes (spec 70 §3.1–3.2 and the gateway's memory
//! routes), as the server parses them. Field names are the LangGraph Platform's and DeerFlow's;
//! every field is optional unless the spec requires it, and a wrong type is a 422 naming the
//! field (the server's `Body` extractor).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
