//! The `messages` channel: an ordered list folded with LangGraph's `add_messages` reducer.
//!
//! Beyond the list itself this keeps an id index (so a write costs O(new messages), not
//! O(history)) and a change log that a checkpointer drains to persist only what changed.
//! Each entry carries an `ord`: a position key that is stable across replacements and removals,
//! increasing along the list, so storage can keep rows keyed by it without rewriting neighbours.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::hash::FastMap;
use crate::messages::{Message, REMOVE_ALL_MESSAGES};

/// One stored message with its stable position key.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub ord: u64,
    pub message: Arc<Message>,
}

/// What a write did to the list, in order; drained by checkpointers.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A message was appended, or replaced the entry at `ord`.
    Upsert {
        ord: u64,
        message: Arc<Message>,
        /// Appended: no entry was at `ord` before (appended positions are past every earlier
        /// one), so a store has nothing there to replace.
        appended: bool,
    },
    /// The entry at `ord` was removed.
    Remove { ord: u64 },
    /// Every entry was removed (remove-all marker); later changes rebuild the list.
    Clear,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddMessagesError {
    #[error("Attempting to delete a message with an ID that doesn't exist ('{0}')")]
    RemoveUnknown(String),
}

/// The ordered message list of a thread.
///
/// The messages themselves live in one `Arc<Vec<Arc<Message>>>` that model requests share
/// without copying ([`Messages::shared`]); appends go in place while nobody else holds it.
#[derive(Clone, Debug, Default)]
pub struct Messages {
    msgs: Arc<Vec<Arc<Message>>>,
    /// Stable position key of each message, parallel to `msgs`.
    ords: Vec<u64>,
    /// id → index of the last message with that id (empty while `unindexed`).
    index: FastMap<Arc<str>, usize>,
    /// A read-only list ([`Messages::from_shared`]): no index; lookups scan and the first write
    /// rebuilds it.
    unindexed: bool,
    next_ord: u64,
    changes: Vec<Change>,
    /// Bumped whenever a message already in the list is replaced or removed: a later state of
    /// this list with the same generation only appended to it.
    generation: u64,
}

impl PartialEq for Messages {
    fn eq(&self, other: &Self) -> bool {
        self.msgs.len() == other.msgs.len()
            && self.msgs.iter().zip(other.msgs.iter()).all(|(a, b)| a == b)
    }
}

fn fresh_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Messages {
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuild from stored entries (ords as persisted, ascending). Records no changes.
    pub fn from_entries(entries: Vec<Entry>) -> Self {
        let next_ord = entries.iter().map(|e| e.ord + 1).max().unwrap_or(0);
        let mut ords = Vec::with_capacity(entries.len());
        let mut msgs = Vec::with_capacity(entries.len());
        for e in entries {
            ords.push(e.ord);
            msgs.push(e.message);
        }
        let mut list = Messages {
            msgs: Arc::new(msgs),
            ords,
            index: FastMap::default(),
            unindexed: false,
            next_ord,
            changes: Vec::new(),
            generation: 0,
        };
        list.reindex();
        list
    }

    /// Build from plain messages (ids assigned where missing). Records no changes.
    pub fn from_messages(msgs: impl IntoIterator<Item = Message>) -> Self {
        let msgs: Vec<Arc<Message>> = msgs
            .into_iter()
            .map(|mut m| {
                if m.id().is_none() {
                    m.set_id(fresh_id());
                }
                Arc::new(m)
            })
            .collect();
        let mut list = Messages::from_shared(msgs);
        list.reindex();
        list
    }

    /// A read-only list of `msgs`: no id index (lookups scan; the first write rebuilds it), no
    /// change log, position keys 0, 1, … . For showing a retained snapshot, not for a
    /// thread's state.
    pub fn from_shared(msgs: Vec<Arc<Message>>) -> Messages {
        Messages {
            ords: (0..msgs.len() as u64).collect(),
            next_ord: msgs.len() as u64,
            msgs: Arc::new(msgs),
            index: FastMap::default(),
            unindexed: true,
            changes: Vec::new(),
            generation: 0,
        }
    }

    /// See the field: equal generations of one list mean the later state extends the earlier.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn reindex(&mut self) {
        self.unindexed = false;
        self.index.clear();
        for (i, m) in self.msgs.iter().enumerate() {
            if let Some(id) = m.id() {
                self.index.insert(Arc::from(id), i);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// The messages with their position keys (copies the list: O(n), for storage and tests).
    pub fn entries(&self) -> Vec<Entry> {
        self.ords
            .iter()
            .zip(self.msgs.iter())
            .map(|(&ord, m)| Entry {
                ord,
                message: m.clone(),
            })
            .collect()
    }

    /// Position keys, parallel to the messages.
    pub fn ords(&self) -> &[u64] {
        &self.ords
    }

    /// The list itself, shared: O(1). Model requests hold this instead of a copy.
    pub fn shared(&self) -> Arc<Vec<Arc<Message>>> {
        self.msgs.clone()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Message> + ExactSizeIterator {
        self.msgs.iter().map(|m| m.as_ref())
    }

    pub fn arcs(&self) -> impl DoubleEndedIterator<Item = &Arc<Message>> + ExactSizeIterator {
        self.msgs.iter()
    }

    pub fn get(&self, i: usize) -> Option<&Message> {
        self.msgs.get(i).map(|m| m.as_ref())
    }

    pub fn last(&self) -> Option<&Message> {
        self.msgs.last().map(|m| m.as_ref())
    }

    pub fn by_id(&self, id: &str) -> Option<&Message> {
        self.position(id)
            .and_then(|i| self.msgs.get(i))
            .map(|m| m.as_ref())
    }

    /// Index of the last message with `id`.
    pub fn position(&self, id: &str) -> Option<usize> {
        if self.unindexed {
            return self.msgs.iter().rposition(|m| m.id() == Some(id));
        }
        self.index.get(id).copied()
    }

    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }

    /// Changes recorded since the last [`Messages::take_changes`].
    pub fn pending_changes(&self) -> &[Change] {
        &self.changes
    }

    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    fn append(&mut self, id: Arc<str>, message: Arc<Message>) {
        let ord = self.next_ord;
        self.next_ord += 1;
        self.changes.push(Change::Upsert {
            ord,
            message: message.clone(),
            appended: true,
        });
        self.index.insert(id, self.msgs.len());
        Arc::make_mut(&mut self.msgs).push(message);
        self.ords.push(ord);
    }

    /// Fold one write with LangGraph's `add_messages` semantics (spec 10 §2).
    ///
    /// Ids are assigned to incoming messages without one; a `remove` with id `__remove_all__`
    /// discards everything before it; a known id replaces in place; a `remove` of a known id
    /// drops every occurrence; removing an unknown id is an error and leaves the list untouched.
    pub fn add(&mut self, write: Vec<Message>) -> Result<(), AddMessagesError> {
        if self.unindexed {
            self.reindex();
        }
        let mut write = write;
        for m in &mut write {
            if m.id().is_none() {
                m.set_id(fresh_id());
            }
        }
        let last_remove_all = write
            .iter()
            .rposition(|m| matches!(m, Message::Remove(_)) && m.id() == Some(REMOVE_ALL_MESSAGES));
        if let Some(pos) = last_remove_all {
            // Result = the tail after the marker, not de-duplicated. (LangGraph would even keep
            // stray remove instructions of the tail as messages; they are dropped here.)
            self.msgs = Arc::new(Vec::new());
            self.ords.clear();
            self.index.clear();
            self.changes.push(Change::Clear);
            self.generation += 1;
            for m in write
                .into_iter()
                .skip(pos + 1)
                .filter(|m| !matches!(m, Message::Remove(_)))
            {
                let id: Arc<str> = Arc::from(m.id().unwrap_or_default());
                self.append(id, Arc::new(m));
            }
            self.reindex();
            return Ok(());
        }

        // Validate removals first so an error leaves the list untouched.
        {
            let mut known: std::collections::HashSet<&str> =
                std::collections::HashSet::with_capacity(write.len());
            for m in &write {
                let id = m.id().unwrap_or_default();
                let exists = self.index.contains_key(id) || known.contains(id);
                match m {
                    Message::Remove(_) if !exists => {
                        return Err(AddMessagesError::RemoveUnknown(id.to_owned()))
                    }
                    Message::Remove(_) => {}
                    _ => {
                        known.insert(id);
                    }
                }
            }
        }

        let mut to_remove: Vec<Arc<str>> = Vec::new();
        for m in write {
            let id: Arc<str> = Arc::from(m.id().unwrap_or_default());
            match (self.index.get(&id).copied(), &m) {
                (Some(_), Message::Remove(_)) => {
                    if !to_remove.contains(&id) {
                        to_remove.push(id);
                    }
                }
                (Some(i), _) => {
                    to_remove.retain(|r| r != &id);
                    let message = Arc::new(m);
                    self.changes.push(Change::Upsert {
                        ord: self.ords[i],
                        message: message.clone(),
                        appended: false,
                    });
                    Arc::make_mut(&mut self.msgs)[i] = message;
                    self.generation += 1;
                }
                (None, Message::Remove(_)) => {
                    // Unreachable after validation; keep the reducer total.
                    return Err(AddMessagesError::RemoveUnknown(id.to_string()));
                }
                (None, _) => self.append(id, Arc::new(m)),
            }
        }
        if !to_remove.is_empty() {
            let msgs = Arc::make_mut(&mut self.msgs);
            let mut kept_msgs = Vec::with_capacity(msgs.len());
            let mut kept_ords = Vec::with_capacity(msgs.len());
            for (m, ord) in msgs.drain(..).zip(self.ords.drain(..)) {
                let gone = m
                    .id()
                    .is_some_and(|id| to_remove.iter().any(|r| r.as_ref() == id));
                if gone {
                    self.changes.push(Change::Remove { ord });
                } else {
                    kept_msgs.push(m);
                    kept_ords.push(ord);
                }
            }
            *msgs = kept_msgs;
            self.ords = kept_ords;
            self.generation += 1;
            self.reindex();
        }
        Ok(())
    }

    /// Append one message (id assigned when missing). Shorthand for `add(vec![m])`.
    pub fn push(&mut self, m: Message) {
        // A non-remove write never fails.
        let _ = self.add(vec![m]);
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<Message>::deserialize(d)?;
        Ok(Messages::from_messages(v))
    }
}

impl FromIterator<Message> for Messages {
    fn from_iter<T: IntoIterator<Item = Message>>(iter: T) -> Self {
        Messages::from_messages(iter)
    }
}
