//! Tools and the registry the agent offers to its model.

use std::collections::HashMap;
use std::sync::Arc;

use antler_protocol::{Content, Object, StateUpdate, ThreadState, ToolSpec, ToolStatus};
use async_trait::async_trait;
use serde_json::Value;

use crate::context::RunContext;

/// Where a tool's [`Command`] sends the run next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goto {
    /// End the run once the current tool batch is recorded (clarification).
    End,
}

/// What the tool onion yields for one call: a tool message, or a command carrying one.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // a command carries a whole StateUpdate; moved once per call
pub enum ToolOutcome {
    Message(antler_protocol::ToolMessage),
    Command(Command),
}

/// A state update returned in place of a plain tool result. Its `update.messages` must contain
/// the tool message answering the call.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub update: StateUpdate,
    pub goto: Option<Goto>,
}

/// What a tool returns.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // see ToolOutcome
pub enum ToolOutput {
    /// Content for a tool message (the runtime fills in `tool_call_id`, `name`, `id`).
    Content {
        content: Content,
        status: ToolStatus,
        artifact: Value,
        additional_kwargs: Object,
    },
    /// A state update with its own tool message.
    Command(Command),
}

impl ToolOutput {
    pub fn text(s: impl Into<String>) -> Self {
        ToolOutput::Content {
            content: Content::Text(s.into()),
            status: ToolStatus::Success,
            artifact: Value::Null,
            additional_kwargs: Object::new(),
        }
    }

    /// An error result the model can read and recover from. DeerFlow prompts expect the text to
    /// start with `Error:`; the prefix is added when missing.
    pub fn error(s: impl Into<String>) -> Self {
        let s = s.into();
        let s = if s.starts_with("Error") {
            s
        } else {
            format!("Error: {s}")
        };
        ToolOutput::Content {
            content: Content::Text(s),
            status: ToolStatus::Error,
            artifact: Value::Null,
            additional_kwargs: Object::new(),
        }
    }

    /// Any JSON value as content: strings stay, lists of content blocks stay, anything else is
    /// JSON-encoded (spec 10 §1.4 rule 4).
    pub fn value(v: Value) -> Self {
        let content = match v {
            Value::String(s) => Content::Text(s),
            Value::Array(items) if items.iter().all(Value::is_object) => Content::Blocks(items),
            other => Content::Text(other.to_string()),
        };
        ToolOutput::Content {
            content,
            status: ToolStatus::Success,
            artifact: Value::Null,
            additional_kwargs: Object::new(),
        }
    }
}

/// A tool failure the tool could not express as a result.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not match the tool's schema. The executor turns this into DeerFlow's
    /// "Error invoking tool" message so the model can fix its call.
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool failed. Without an error-handling middleware this fails the run.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A `Command` without a tool message answering its call.
    #[error("tool '{0}' returned a command without a ToolMessage for call {1}")]
    InvalidCommand(String, String),
}

/// What a tool sees of the run.
#[derive(Clone, Copy)]
pub struct ToolContext<'a> {
    pub call_id: &'a str,
    pub state: &'a ThreadState,
    pub run: &'a RunContext,
}

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> &Arc<ToolSpec>;

    fn name(&self) -> &str {
        &self.spec().name
    }

    /// When every registered call of a model turn is to `return_direct` tools, the run ends after
    /// them without another model call.
    fn return_direct(&self) -> bool {
        false
    }

    /// Whether results carry attacker-controllable remote content (web pages, search snippets,
    /// an MCP server's answers). ToolResultSanitization neutralizes framework tags in the
    /// results of such tools before the model sees them.
    fn returns_remote_content(&self) -> bool {
        false
    }

    async fn call(&self, args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError>;
}

/// Parse a tool's arguments into its typed struct; failures are `InvalidArguments`.
pub fn parse_args<T: serde::de::DeserializeOwned>(args: Object) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// The ordered set of tools offered to the model. Duplicate names: the first wins.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    by_name: HashMap<String, usize>,
    specs: Vec<Arc<ToolSpec>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tool; returns false (and keeps the first) when the name is taken.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> bool {
        let name = tool.name().to_owned();
        if self.by_name.contains_key(&name) {
            tracing::warn!(tool = %name, "duplicate tool name; keeping the first");
            return false;
        }
        self.by_name.insert(name, self.tools.len());
        self.specs.push(tool.spec().clone());
        self.tools.push(tool);
        true
    }

    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.register(tool);
        self
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    pub fn remove(&mut self, name: &str) {
        if self.by_name.contains_key(name) {
            let keep: Vec<Arc<dyn Tool>> =
                self.tools.drain(..).filter(|t| t.name() != name).collect();
            *self = ToolRegistry::default();
            for t in keep {
                self.register(t);
            }
        }
    }

    pub fn specs(&self) -> &[Arc<ToolSpec>] {
        &self.specs
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name())
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
