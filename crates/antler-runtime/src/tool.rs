//! Tools and the registry the agent offers to its model.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use antler_protocol::hash::FastMap;
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

impl<'a> ToolContext<'a> {
    /// The context of call `call_id` in a run.
    pub fn new(call_id: &'a str, state: &'a ThreadState, run: &'a RunContext) -> ToolContext<'a> {
        ToolContext {
            call_id,
            state,
            run,
        }
    }

    /// A reporter for live progress of this call (`tool` is the tool's name), or `None` when
    /// nobody consumes `custom` events — check before doing any work for a report.
    pub fn progress(&self, tool: &str) -> Option<ProgressReporter> {
        let sender = self.run.events.custom_sender()?;
        Some(ProgressReporter {
            sender,
            call_id: Arc::from(self.call_id),
            tool: Arc::from(tool),
            sent: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        })
    }
}

/// Streams a running tool call's progress as `custom` events
/// `{"type": "tool_progress", "tool_call_id", "tool", "message"}` (a UI shows them under the
/// call; `antler run` prints them in text mode). Never part of the tool's result. Cheap to
/// clone and `'static`, so a tool can hand it to the tasks reading a child process's output.
#[derive(Clone)]
pub struct ProgressReporter {
    sender: crate::context::CustomSender,
    call_id: Arc<str>,
    tool: Arc<str>,
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl ProgressReporter {
    /// Reports per call at most; a chatty command cannot flood the stream.
    pub const MAX_REPORTS: usize = 500;
    /// Longest message (chars); longer ones are cut with `…`.
    pub const MAX_CHARS: usize = 300;

    /// Report one step or output line.
    pub fn report(&self, message: &str) {
        use std::sync::atomic::Ordering;
        let n = self.sent.fetch_add(1, Ordering::Relaxed);
        let message = match n.cmp(&Self::MAX_REPORTS) {
            std::cmp::Ordering::Less => {
                if message.chars().count() > Self::MAX_CHARS {
                    let mut cut: String = message.chars().take(Self::MAX_CHARS - 1).collect();
                    cut.push('…');
                    cut
                } else {
                    message.to_owned()
                }
            }
            std::cmp::Ordering::Equal => "… (further progress not shown)".to_owned(),
            std::cmp::Ordering::Greater => return,
        };
        self.sender.emit(serde_json::json!({
            "type": "tool_progress",
            "tool_call_id": &*self.call_id,
            "tool": &*self.tool,
            "message": message,
        }));
    }
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

/// A tool whose arguments are one typed struct. The blanket impl makes it a [`Tool`]: the
/// model's arguments are parsed once into [`TypedTool::Args`] (a `null` counts as an absent
/// value, as pydantic treats `None` for optional arguments), and a mismatch becomes
/// [`ToolError::InvalidArguments`] — the "Error invoking tool" message the model can fix its
/// call from. The parameters schema is derived from the same type ([`TypedSpec`]), so what the
/// model is offered and what the tool accepts cannot drift apart.
///
/// The methods have names of their own (`typed_spec`, `invoke`, the two consts) so a type that
/// is both a `TypedTool` and, through the blanket impl, a `Tool` never has ambiguous calls.
#[async_trait]
pub trait TypedTool: Send + Sync {
    type Args: serde::de::DeserializeOwned + schemars::JsonSchema + Send;

    /// See [`Tool::return_direct`].
    const RETURN_DIRECT: bool = false;
    /// See [`Tool::returns_remote_content`].
    const REMOTE_CONTENT: bool = false;

    fn typed_spec(&self) -> &TypedSpec<Self::Args>;

    async fn invoke(&self, args: Self::Args, ctx: ToolContext<'_>)
        -> Result<ToolOutput, ToolError>;
}

/// A [`TypedTool`]'s `typed_spec`, read from the named field of `self`:
/// `typed_spec!(spec);` inside the `impl TypedTool`.
#[macro_export]
macro_rules! typed_spec {
    ($field:ident) => {
        fn typed_spec(&self) -> &$crate::TypedSpec<Self::Args> {
            &self.$field
        }
    };
}

#[async_trait]
impl<T: TypedTool> Tool for T {
    fn spec(&self) -> &Arc<ToolSpec> {
        &self.typed_spec().spec
    }

    fn return_direct(&self) -> bool {
        T::RETURN_DIRECT
    }

    fn returns_remote_content(&self) -> bool {
        T::REMOTE_CONTENT
    }

    async fn call(&self, mut args: Object, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        args.retain(|_, v| !v.is_null());
        let args = parse_args::<T::Args>(args)?;
        self.invoke(args, ctx).await
    }
}

/// A tool spec whose parameters are derived from `A` (see [`parameters_schema`]).
pub struct TypedSpec<A> {
    spec: Arc<ToolSpec>,
    _args: std::marker::PhantomData<fn() -> A>,
}

impl<A: schemars::JsonSchema> TypedSpec<A> {
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        TypedSpec {
            spec: Arc::new(ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters: parameters_schema::<A>(),
            }),
            _args: std::marker::PhantomData,
        }
    }

    /// Replace one property's description with text known only when the tool is built (the
    /// `task` tool lists the configured subagent types).
    pub fn describe(mut self, property: &str, description: impl Into<String>) -> Self {
        let spec = Arc::make_mut(&mut self.spec);
        if let Some(p) = spec
            .parameters
            .get_mut("properties")
            .and_then(|p| p.get_mut(property))
            .and_then(Value::as_object_mut)
        {
            p.insert("description".into(), Value::String(description.into()));
        }
        self
    }

    /// Drop properties the tool does not offer in this configuration (DeerFlow's signature of
    /// a provider may lack an argument the type has).
    pub fn without(mut self, properties: &[&str]) -> Self {
        let params = &mut Arc::make_mut(&mut self.spec).parameters;
        if let Some(p) = params.get_mut("properties").and_then(Value::as_object_mut) {
            p.retain(|k, _| !properties.contains(&k.as_str()));
        }
        if let Some(r) = params.get_mut("required").and_then(Value::as_array_mut) {
            r.retain(|k| !k.as_str().is_some_and(|k| properties.contains(&k)));
        }
        self
    }

    pub fn spec(&self) -> &Arc<ToolSpec> {
        &self.spec
    }
}

/// The parameters schema of `A` in the shape LangChain offers models for a pydantic signature:
/// inline (no `$defs`), no `$schema`/`title`/root description, optional values as
/// `anyOf: [{…}, {"type": "null"}]`, integers without a `format`.
pub fn parameters_schema<A: schemars::JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if let Some(root) = schema.as_object_mut() {
        root.remove("title");
        root.remove("description");
    }
    langchain_shape(&mut schema);
    schema
}

fn langchain_shape(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = obj.get("type") {
        let others: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if others.len() == 1 && others.len() < types.len() {
            // `Option<T>`: schemars says `type: [T, "null"]`; pydantic says anyOf.
            let mut inner = Object::new();
            let mut outer = Object::new();
            for (k, v) in std::mem::take(obj) {
                match k.as_str() {
                    "default" | "description" => {
                        outer.insert(k, v);
                    }
                    "type" => {
                        inner.insert(k, others[0].clone());
                    }
                    _ => {
                        inner.insert(k, v);
                    }
                }
            }
            let mut any_of = vec![Value::Object(inner), serde_json::json!({"type": "null"})];
            any_of.iter_mut().for_each(langchain_shape);
            obj.insert("anyOf".into(), Value::Array(any_of));
            obj.extend(outer);
            return;
        }
    }
    if obj.get("type").and_then(Value::as_str) == Some("integer") {
        obj.remove("format");
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get_mut(key) {
            langchain_shape(sub);
        }
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.values_mut().for_each(langchain_shape);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(subs)) = obj.get_mut(key) {
            subs.iter_mut().for_each(langchain_shape);
        }
    }
}

/// The ordered set of tools offered to the model. Duplicate names: the first wins.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    by_name: FastMap<String, usize>,
    specs: Vec<Arc<ToolSpec>>,
    /// The names in order, shared by every tool call of every run (built at registration).
    names: Arc<[String]>,
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
        self.names = self.tools.iter().map(|t| t.name().to_owned()).collect();
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

    /// The names in order, as one shared list (no copy per call).
    pub fn shared_names(&self) -> Arc<[String]> {
        self.names.clone()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// Per-(scope, file) async mutexes so parallel edits of one file (in one sandbox, in one
/// thread…) both land. Entries are dropped when no call holds them.
type LockMap = HashMap<(String, String), Weak<tokio::sync::Mutex<()>>>;

#[derive(Default)]
pub struct FileLocks {
    map: Mutex<LockMap>,
}

impl FileLocks {
    pub fn lock_for(&self, scope: &str, path: &str) -> Arc<tokio::sync::Mutex<()>> {
        let Ok(mut map) = self.map.lock() else {
            return Arc::new(tokio::sync::Mutex::new(()));
        };
        map.retain(|_, w| w.strong_count() > 0);
        let key = (scope.to_owned(), path.to_owned());
        if let Some(existing) = map.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        let fresh = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(key, Arc::downgrade(&fresh));
        fresh
    }

    /// Live entries (tests).
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .map(|m| m.values().filter(|w| w.strong_count() > 0).count())
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// JSON with object keys sorted at every level and `separators` (between items, between a key
/// and its value) instead of serde's: `(",", ":")` is the compact canonical form,
/// `(", ", ": ")` Python's `json.dumps(sort_keys=True, ensure_ascii=False)`. Scalars are
/// written as serde writes them. Two equal values always give the same text (hash inputs).
pub fn canonical_json(v: &Value, separators: (&str, &str)) -> String {
    let mut out = Vec::new();
    write_canonical(v, separators, &mut out);
    into_string(out)
}

/// [`canonical_json`] of an object.
pub fn canonical_json_object(o: &Object, separators: (&str, &str)) -> String {
    canonical_json_entries(
        &mut o.iter().map(|(k, v)| (k.as_str(), v)).collect::<Vec<_>>(),
        separators,
    )
}

/// [`canonical_json`] of the object with these entries (sorted here; keys must be unique): for
/// a selection of an object's fields, without copying them into a map of their own.
pub fn canonical_json_entries(entries: &mut [(&str, &Value)], separators: (&str, &str)) -> String {
    let mut out = Vec::new();
    write_entries(entries, separators, &mut out);
    into_string(out)
}

/// serde_json writes UTF-8 only; the fallback never runs (and cannot panic).
fn into_string(out: Vec<u8>) -> String {
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A key or scalar as serde writes it (writing into a `Vec` cannot fail).
fn write_json<T: serde::Serialize + ?Sized>(v: &T, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, v);
}

fn write_canonical(v: &Value, separators: (&str, &str), out: &mut Vec<u8>) {
    match v {
        Value::Object(o) => {
            let mut entries: Vec<(&str, &Value)> = o.iter().map(|(k, v)| (k.as_str(), v)).collect();
            write_entries(&mut entries, separators, out);
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(separators.0.as_bytes());
                }
                write_canonical(item, separators, out);
            }
            out.push(b']');
        }
        scalar => write_json(scalar, out),
    }
}

fn write_entries(entries: &mut [(&str, &Value)], separators: (&str, &str), out: &mut Vec<u8>) {
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (i, (k, val)) in entries.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(separators.0.as_bytes());
        }
        write_json(*k, out);
        out.extend_from_slice(separators.1.as_bytes());
        write_canonical(val, separators, out);
    }
    out.push(b'}');
}

#[cfg(test)]
mod canonical_tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level_with_the_given_separators() {
        let v = serde_json::json!({"b": [1, {"d": "x", "c": null}], "a": "é"});
        assert_eq!(
            canonical_json(&v, (",", ":")),
            r#"{"a":"é","b":[1,{"c":null,"d":"x"}]}"#
        );
        assert_eq!(
            canonical_json(&v, (", ", ": ")),
            r#"{"a": "é", "b": [1, {"c": null, "d": "x"}]}"#
        );
        let Value::Object(o) = &v else { unreachable!() };
        assert_eq!(
            canonical_json_object(o, (",", ":")),
            canonical_json(&v, (",", ":"))
        );
        // Keys and strings are escaped as serde escapes them.
        let q = serde_json::json!({"k\"ey\n": "line\u{1}\"", "n": [1.5, -2, true]});
        assert_eq!(
            canonical_json(&q, (",", ":")),
            r#"{"k\"ey\n":"line\u0001\"","n":[1.5,-2,true]}"#
        );
        let (b, a) = (Value::from("x"), Value::from(1));
        assert_eq!(
            canonical_json_entries(&mut [("b", &b), ("a", &a)], (",", ":")),
            r#"{"a":1,"b":"x"}"#
        );
    }
}
