//! [`Shared`]: a copy-on-write field for the parts of a message that middlewares copy but
//! rarely change (`additional_kwargs`, `response_metadata`, tool calls).
//!
//! A message goes through several versions in one step (decoded, id'ed, stamped with token
//! attribution, repaired...) and every retained snapshot of the run may hold an older one. With
//! these fields shared, a new version copies pointers, not maps: only the field that really
//! changes is copied, on its first write. An empty field holds no allocation at all, which also
//! keeps `Message` small (a pointer per field instead of an inline map).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::messages::{InvalidToolCall, Object, ToolCall};

/// A value [`Shared`] can hold: clonable, with an empty form that a `&'static` can point at.
pub trait SharedValue: Clone + Default + Send + Sync + 'static {
    /// The empty value, shown for a field that holds nothing.
    fn empty() -> &'static Self;
    fn is_empty_value(&self) -> bool;
}

impl SharedValue for Object {
    fn empty() -> &'static Self {
        static EMPTY: OnceLock<Object> = OnceLock::new();
        EMPTY.get_or_init(Object::new)
    }
    fn is_empty_value(&self) -> bool {
        self.is_empty()
    }
}

/// Lists: a `static` empty vector per element type (statics cannot be generic).
macro_rules! shared_vec {
    ($($t:ty),*) => {$(
        impl SharedValue for Vec<$t> {
            fn empty() -> &'static Self {
                static EMPTY: Vec<$t> = Vec::new();
                &EMPTY
            }
            fn is_empty_value(&self) -> bool {
                self.is_empty()
            }
        }
    )*};
}

shared_vec!(ToolCall, InvalidToolCall);

/// Copy-on-write: `clone` copies a pointer; `deref_mut` copies the value first when another
/// version still shares it (`Arc::make_mut`). Reads, comparisons and serialization see the
/// value itself, so the wire form is exactly `T`'s.
pub struct Shared<T: SharedValue>(Option<Arc<T>>);

impl<T: SharedValue> Shared<T> {
    /// The value, copied only when another version shares it.
    pub fn into_inner(self) -> T {
        match self.0 {
            Some(arc) => Arc::unwrap_or_clone(arc),
            None => T::default(),
        }
    }

    /// Take the value out, leaving the field empty.
    pub fn take(&mut self) -> T {
        std::mem::take(self).into_inner()
    }

    /// The shared allocation's address (`None` while empty): identity for counting memory
    /// held by several versions once.
    pub fn addr(&self) -> Option<usize> {
        self.0.as_ref().map(|arc| Arc::as_ptr(arc) as usize)
    }

    /// Whether both hold the same allocation (or both nothing): equal without comparing.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

/// A map's `get_mut` and `remove` that copy a shared map only when the key is there. These
/// shadow the map's own (reached through `DerefMut`, which copies first): a repair or cleanup
/// that finds nothing to change leaves the versions sharing.
impl Shared<Object> {
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        if !self.contains_key(key) {
            return None;
        }
        DerefMut::deref_mut(self).get_mut(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        if !self.contains_key(key) {
            return None;
        }
        DerefMut::deref_mut(self).remove(key)
    }
}

impl<T: SharedValue> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        if value.is_empty_value() {
            Shared(None)
        } else {
            Shared(Some(Arc::new(value)))
        }
    }
}

impl<T: SharedValue> Default for Shared<T> {
    fn default() -> Self {
        Shared(None)
    }
}

impl<T: SharedValue> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: SharedValue> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match &self.0 {
            Some(arc) => arc,
            None => T::empty(),
        }
    }
}

impl<T: SharedValue> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }
}

impl<T: SharedValue + PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || **self == **other
    }
}

impl<T: SharedValue + PartialEq> PartialEq<T> for Shared<T> {
    fn eq(&self, other: &T) -> bool {
        **self == *other
    }
}

impl<T: SharedValue + fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: SharedValue + Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de, T: SharedValue + Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Shared::from)
    }
}

impl<'a, T: SharedValue> IntoIterator for &'a Shared<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        (**self).into_iter()
    }
}

impl<T: SharedValue> IntoIterator for Shared<T>
where
    T: IntoIterator,
{
    type Item = T::Item;
    type IntoIter = T::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        self.into_inner().into_iter()
    }
}

impl<T: SharedValue> FromIterator<<T as IntoIterator>::Item> for Shared<T>
where
    T: IntoIterator + FromIterator<<T as IntoIterator>::Item>,
{
    fn from_iter<I: IntoIterator<Item = <T as IntoIterator>::Item>>(iter: I) -> Self {
        Shared::from(iter.into_iter().collect::<T>())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall::new(
            id,
            "bash",
            json!({"command": "ls"}).as_object().unwrap().clone(),
        )
    }

    #[test]
    fn a_clone_shares_until_the_first_write_and_the_original_stays_as_it_was() {
        let a: Shared<Vec<ToolCall>> = vec![call("1")].into();
        let mut b = a.clone();
        assert!(a.ptr_eq(&b));
        b.push(call("2"));
        assert!(!a.ptr_eq(&b));
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 2);
        // The sole owner writes in place.
        let before = b.as_ptr();
        b[0].name = "read_file".into();
        assert_eq!(b.as_ptr(), before);
    }

    #[test]
    fn finding_nothing_to_change_keeps_the_map_shared() {
        let mut a: Shared<Object> = json!({"k": 1}).as_object().unwrap().clone().into();
        let mut b = a.clone();
        assert_eq!(b.remove("absent"), None);
        assert!(b.get_mut("absent").is_none());
        assert!(a.ptr_eq(&b));
        assert_eq!(b.remove("k"), Some(json!(1)));
        assert!(!a.ptr_eq(&b));
        assert_eq!(a.len(), 1);
        // An empty field stays without an allocation.
        let mut e: Shared<Object> = Shared::default();
        assert_eq!(e.remove("k"), None);
        assert!(e.addr().is_none());
        *a.get_mut("k").unwrap() = json!(2);
        assert_eq!(a["k"], json!(2));
    }

    #[test]
    fn empty_holds_nothing_and_reads_as_the_empty_value() {
        let mut m: Shared<Object> = Object::new().into();
        assert!(m.0.is_none());
        assert!(m.is_empty());
        assert_eq!(m, Shared::default());
        m.insert("k".into(), json!(1));
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"k":1}"#);
        assert_eq!(m.take().len(), 1);
        assert!(m.is_empty());
    }

    #[test]
    fn a_new_message_version_copies_only_the_field_it_changes() {
        use crate::messages::AiMessage;
        let mut meta = Object::new();
        meta.insert("finish_reason".into(), json!("tool_calls"));
        let decoded = AiMessage {
            tool_calls: vec![call("1")].into(),
            response_metadata: meta.into(),
            ..Default::default()
        };
        let mut stamped = decoded.clone();
        stamped
            .additional_kwargs
            .insert("attribution".into(), json!({"kind": "tool"}));
        assert!(stamped.tool_calls.ptr_eq(&decoded.tool_calls));
        assert!(stamped.response_metadata.ptr_eq(&decoded.response_metadata));
        assert!(decoded.additional_kwargs.is_empty());
        assert_ne!(stamped, decoded);
    }

    /// Every message in memory is as large as the largest variant: an inline map or vector
    /// added to a message type grows all of them (440 bytes before these fields were shared).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_message_stays_small() {
        use crate::messages::{AiMessage, Message, ToolMessage};
        assert!(std::mem::size_of::<Message>() <= 280);
        assert!(std::mem::size_of::<AiMessage>() <= 280);
        assert!(std::mem::size_of::<ToolMessage>() <= 200);
    }

    #[test]
    fn serializes_and_deserializes_as_the_value_itself() {
        let m: Shared<Object> = serde_json::from_str(r#"{"b":1,"a":[2]}"#).unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"b":1,"a":[2]}"#);
        let none: Shared<Object> = serde_json::from_str("{}").unwrap();
        assert!(none.0.is_none());
    }
}
