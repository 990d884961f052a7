//! The schema of a tool as offered to a model.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Name, description and JSON-schema parameters of one tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}
