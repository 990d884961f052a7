//! `ThreadState` (DeerFlow's graph state) and partial updates folded through per-key reducers.
//!
//! Keys with a reducer (spec 10 §4.2): `messages`, `sandbox`, `artifacts`, `todos`, `goal`,
//! `viewed_images`, `promoted`, `delegations`, `skill_context`. Every other key keeps the last
//! value written. Custom middlewares store their own keys in `extensions` (last write wins).

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::message_list::{AddMessagesError, Messages};
use crate::messages::Message;
use crate::reducers;

/// Host paths of a thread's folders.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploads_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_path: Option<String>,
}

/// `{sandbox_id}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxState {
    pub sandbox_id: Option<String>,
}

/// One plan-mode todo item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

/// Metadata of an image the model viewed (bytes are re-read from disk when needed).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ViewedImage {
    #[serde(default)]
    pub mime_type: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub actual_path: String,
}

/// Deferred tools promoted by `tool_search`, scoped by a catalog hash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promoted {
    pub catalog_hash: Option<String>,
    #[serde(default)]
    pub names: Vec<String>,
}

/// A subagent delegation ledger entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Delegation {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub subagent_type: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_brief: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

impl Delegation {
    /// Terminal statuses of the subagent status contract.
    pub const TERMINAL: [&'static str; 5] = [
        "completed",
        "failed",
        "cancelled",
        "timed_out",
        "polling_timed_out",
    ];

    pub fn is_terminal(&self) -> bool {
        Self::TERMINAL.contains(&self.status.as_str())
    }
}

/// A reference to a SKILL.md the agent read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillEntry {
    #[serde(default)]
    pub name: String,
    pub path: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub loaded_at: i64,
}

/// The checkpointed state of one thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadState {
    #[serde(default)]
    pub messages: Messages,
    pub title: Option<String>,
    #[serde(default)]
    pub artifacts: Vec<String>,
    pub todos: Option<Vec<Todo>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Value>,
    pub uploaded_files: Option<Vec<Value>>,
    #[serde(default)]
    pub viewed_images: Map<String, Value>,
    pub thread_data: Option<ThreadData>,
    pub sandbox: Option<SandboxState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted: Option<Promoted>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegations: Vec<Delegation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_context: Vec<SkillEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_tasks: Option<Vec<Value>>,
    /// Keys owned by custom middlewares (flattened into the JSON object).
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
}

/// Deserialize a field that distinguishes "absent" (outer `None`) from "null" (`Some(None)`).
fn double_option<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A partial write to [`ThreadState`]. `None` = key not touched. For nullable last-value keys,
/// `Some(None)` writes an explicit null.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub title: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<String>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub todos: Option<Option<Vec<Todo>>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub goal: Option<Option<Value>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub uploaded_files: Option<Option<Vec<Value>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewed_images: Option<Map<String, Value>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub thread_data: Option<Option<ThreadData>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub sandbox: Option<Option<SandboxState>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub summary_text: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted: Option<Promoted>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegations: Option<Vec<Delegation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_context: Option<Vec<SkillEntry>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    pub background_tasks: Option<Option<Vec<Value>>>,
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
}

/// A write the reducers rejected; the whole update is then not applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReducerError {
    #[error(transparent)]
    Messages(#[from] AddMessagesError),
    #[error("Conflicting sandbox state updates: {0} != {1}")]
    SandboxConflict(String, String),
}

impl StateUpdate {
    pub fn is_empty(&self) -> bool {
        self == &StateUpdate::default()
    }

    /// Whether the update writes the message list and nothing else (then the other channels
    /// are the same after it, without comparing them).
    pub fn only_messages(&self) -> bool {
        // Destructured so that a new channel cannot be forgotten here.
        let StateUpdate {
            messages: _,
            title,
            artifacts,
            todos,
            goal,
            uploaded_files,
            viewed_images,
            thread_data,
            sandbox,
            summary_text,
            promoted,
            delegations,
            skill_context,
            background_tasks,
            extensions,
        } = self;
        title.is_none()
            && artifacts.is_none()
            && todos.is_none()
            && goal.is_none()
            && uploaded_files.is_none()
            && viewed_images.is_none()
            && thread_data.is_none()
            && sandbox.is_none()
            && summary_text.is_none()
            && promoted.is_none()
            && delegations.is_none()
            && skill_context.is_none()
            && background_tasks.is_none()
            && extensions.is_empty()
    }

    pub fn messages(msgs: Vec<Message>) -> Self {
        StateUpdate {
            messages: Some(msgs),
            ..Default::default()
        }
    }

    pub fn message(msg: impl Into<Message>) -> Self {
        Self::messages(vec![msg.into()])
    }

    /// Merge `other` after `self` into one update with the same effect as applying both in order
    /// through the reducers. Used to coalesce writes of one step.
    pub fn merge(&mut self, other: StateUpdate) -> Result<(), ReducerError> {
        if let Some(m) = other.messages {
            self.messages.get_or_insert_with(Vec::new).extend(m);
        }
        macro_rules! last {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        last!(
            title,
            uploaded_files,
            thread_data,
            summary_text,
            background_tasks
        );
        if let Some(a) = other.artifacts {
            self.artifacts = Some(reducers::merge_artifacts(self.artifacts.take(), Some(a)));
        }
        if let Some(t) = other.todos {
            if t.is_some() || self.todos.is_none() {
                self.todos = Some(t);
            }
        }
        if let Some(g) = other.goal {
            if g.is_some() || self.goal.is_none() {
                self.goal = Some(g);
            }
        }
        if let Some(v) = other.viewed_images {
            self.viewed_images = Some(match self.viewed_images.take() {
                Some(prev) if !v.is_empty() => reducers::merge_viewed_images(Some(prev), Some(v)),
                _ => v,
            });
        }
        if let Some(s) = other.sandbox {
            let prev = self.sandbox.take().flatten();
            self.sandbox = Some(reducers::merge_sandbox(prev, s)?);
        }
        if let Some(p) = other.promoted {
            self.promoted = reducers::merge_promoted(self.promoted.take(), Some(p));
        }
        if let Some(d) = other.delegations {
            self.delegations = Some(reducers::merge_delegations(
                self.delegations.take(),
                Some(d),
            ));
        }
        if let Some(s) = other.skill_context {
            self.skill_context.get_or_insert_with(Vec::new).extend(s);
        }
        self.extensions.extend(other.extensions);
        Ok(())
    }

    /// Give every message of the write an id now, so events and state agree on it.
    pub fn assign_message_ids(&mut self) {
        for m in self.messages.iter_mut().flatten() {
            if m.id().is_none() {
                m.set_id(uuid::Uuid::new_v4().to_string());
            }
        }
    }
}

/// The non-message channels, borrowed, in their stored order.
#[derive(Serialize, PartialEq)]
struct Fields<'a> {
    title: &'a Option<String>,
    artifacts: &'a Vec<String>,
    todos: &'a Option<Vec<Todo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    goal: &'a Option<Value>,
    uploaded_files: &'a Option<Vec<Value>>,
    viewed_images: &'a Map<String, Value>,
    thread_data: &'a Option<ThreadData>,
    sandbox: &'a Option<SandboxState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_text: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    promoted: &'a Option<Promoted>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    delegations: &'a [Delegation],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    skill_context: &'a [SkillEntry],
    #[serde(skip_serializing_if = "Option::is_none")]
    background_tasks: &'a Option<Vec<Value>>,
    #[serde(flatten)]
    extensions: &'a Map<String, Value>,
}

/// The state after a superstep as a `values` event carries it: the non-message channels behind
/// an `Arc` (a run hands out the same one while they do not change, which is most supersteps)
/// and the message list as it stood. Making one costs two reference counts, not a copy of the
/// channels or of the list's position keys; it serializes exactly as the [`ThreadState`] would.
#[derive(Clone, Debug)]
pub struct StateSnapshot {
    /// The non-message channels; this state's own `messages` is empty.
    pub fields: Arc<ThreadState>,
    /// The message list.
    pub messages: Arc<Vec<Arc<Message>>>,
    /// The list's [`Messages::generation`]: equal generations of one run's snapshots mean the
    /// later list extends the earlier.
    pub generation: u64,
    /// The stored checkpoint holding exactly this state, when there is one: a consumer that
    /// keeps the snapshot after its run can let go of it and read the checkpoint back instead.
    pub checkpoint_id: Option<Arc<str>>,
}

impl StateSnapshot {
    /// `fields` (channels only, as [`ThreadState::fields_only`] makes) with `messages` as the list.
    pub fn new(fields: Arc<ThreadState>, messages: &Messages) -> StateSnapshot {
        debug_assert!(fields.messages.is_empty(), "fields carry no messages");
        StateSnapshot {
            fields,
            messages: messages.shared(),
            generation: messages.generation(),
            checkpoint_id: None,
        }
    }

    /// The same snapshot, known to be stored as checkpoint `id`.
    pub fn stored_as(mut self, id: Option<Arc<str>>) -> StateSnapshot {
        self.checkpoint_id = id;
        self
    }

    /// A whole state taken apart (a stored checkpoint replayed as one `values` event).
    pub fn from_state(mut state: ThreadState) -> StateSnapshot {
        let messages = std::mem::take(&mut state.messages);
        StateSnapshot::new(Arc::new(state), &messages)
    }

    /// The state it shows, as a read-only copy (no id index until written).
    pub fn to_state(&self) -> ThreadState {
        self.fields
            .with_messages(Messages::from_shared(self.messages.as_ref().clone()))
    }
}

impl Serialize for StateSnapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Whole<'a> {
            messages: &'a [Arc<Message>],
            #[serde(flatten)]
            fields: Fields<'a>,
        }
        Whole {
            messages: &self.messages,
            fields: self.fields.fields(),
        }
        .serialize(s)
    }
}

impl ThreadState {
    /// The state as a `values` event carries it, its channels copied once (a run shares them
    /// between snapshots instead: see [`StateSnapshot`]).
    pub fn snapshot(&self) -> StateSnapshot {
        StateSnapshot::new(Arc::new(self.fields_only()), &self.messages)
    }

    /// Apply one write through the reducers. On error nothing is applied.
    pub fn apply(&mut self, update: StateUpdate) -> Result<(), ReducerError> {
        // Check the only fallible non-message reducer before touching anything.
        let sandbox = match update.sandbox {
            Some(new) => Some(reducers::merge_sandbox(self.sandbox.clone(), new)?),
            None => None,
        };
        if let Some(msgs) = update.messages {
            self.messages.add(msgs)?;
        }
        if let Some(s) = sandbox {
            self.sandbox = s;
        }
        if let Some(t) = update.title {
            self.title = t;
        }
        if let Some(a) = update.artifacts {
            self.artifacts =
                reducers::merge_artifacts(Some(std::mem::take(&mut self.artifacts)), Some(a));
        }
        if let Some(t) = update.todos {
            self.todos = reducers::merge_todos(self.todos.take(), t);
        }
        if let Some(g) = update.goal {
            self.goal = reducers::merge_todos(self.goal.take(), g);
        }
        if let Some(u) = update.uploaded_files {
            self.uploaded_files = u;
        }
        if let Some(v) = update.viewed_images {
            self.viewed_images = reducers::merge_viewed_images(
                Some(std::mem::take(&mut self.viewed_images)),
                Some(v),
            );
        }
        if let Some(t) = update.thread_data {
            self.thread_data = t;
        }
        if let Some(s) = update.summary_text {
            self.summary_text = s;
        }
        if let Some(p) = update.promoted {
            self.promoted = reducers::merge_promoted(self.promoted.take(), Some(p));
        }
        if let Some(d) = update.delegations {
            self.delegations =
                reducers::merge_delegations(Some(std::mem::take(&mut self.delegations)), Some(d));
        }
        if let Some(s) = update.skill_context {
            self.skill_context = reducers::merge_skill_context(
                Some(std::mem::take(&mut self.skill_context)),
                Some(s),
            );
        }
        if let Some(b) = update.background_tasks {
            self.background_tasks = b;
        }
        for (k, v) in update.extensions {
            self.extensions.insert(k, v);
        }
        Ok(())
    }

    /// The last AI message, if any.
    pub fn last_ai(&self) -> Option<&crate::messages::AiMessage> {
        self.messages.iter().rev().find_map(Message::as_ai)
    }

    /// The non-message channels as JSON (what a checkpoint stores beside the messages).
    /// Costs O(size of those channels), never O(history).
    pub fn fields_value(&self) -> Value {
        serde_json::to_value(self.fields()).unwrap_or(Value::Null)
    }

    /// Whether the non-message channels equal `other`'s — what [`ThreadState::fields_value`]
    /// would write, compared in place (the loop asks at every checkpoint; they rarely change).
    pub fn same_fields(&self, other: &ThreadState) -> bool {
        self.fields() == other.fields()
    }

    /// The non-message channels alone, with an empty message list (what
    /// [`ThreadState::same_fields`] compares against later).
    pub fn fields_only(&self) -> ThreadState {
        self.with_messages(Messages::default())
    }

    /// The non-message channels cloned, with `messages` as the list.
    fn with_messages(&self, messages: Messages) -> ThreadState {
        // Destructured so that a new channel cannot be forgotten here.
        let ThreadState {
            messages: _,
            title,
            artifacts,
            todos,
            goal,
            uploaded_files,
            viewed_images,
            thread_data,
            sandbox,
            summary_text,
            promoted,
            delegations,
            skill_context,
            background_tasks,
            extensions,
        } = self;
        ThreadState {
            messages,
            title: title.clone(),
            artifacts: artifacts.clone(),
            todos: todos.clone(),
            goal: goal.clone(),
            uploaded_files: uploaded_files.clone(),
            viewed_images: viewed_images.clone(),
            thread_data: thread_data.clone(),
            sandbox: sandbox.clone(),
            summary_text: summary_text.clone(),
            promoted: promoted.clone(),
            delegations: delegations.clone(),
            skill_context: skill_context.clone(),
            background_tasks: background_tasks.clone(),
            extensions: extensions.clone(),
        }
    }

    fn fields(&self) -> Fields<'_> {
        Fields {
            title: &self.title,
            artifacts: &self.artifacts,
            todos: &self.todos,
            goal: &self.goal,
            uploaded_files: &self.uploaded_files,
            viewed_images: &self.viewed_images,
            thread_data: &self.thread_data,
            sandbox: &self.sandbox,
            summary_text: &self.summary_text,
            promoted: &self.promoted,
            delegations: &self.delegations,
            skill_context: &self.skill_context,
            background_tasks: &self.background_tasks,
            extensions: &self.extensions,
        }
    }

    /// Rebuild a state from stored channels and a message list.
    pub fn from_parts(fields: Value, messages: Messages) -> Result<ThreadState, serde_json::Error> {
        let mut state: ThreadState = if fields.is_null() {
            ThreadState::default()
        } else {
            serde_json::from_value(fields)?
        };
        state.messages = messages;
        Ok(state)
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
