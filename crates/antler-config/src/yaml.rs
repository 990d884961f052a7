//! The document tree the loader edits between parsing and typed deserialization.
//!
//! `serde-saphyr` has no value type of its own, and `serde_json::Value` would turn `.nan` and
//! `.inf` into null (validation must see them as floats) and lose non-string keys. So the
//! loader parses into this small ordered tree, rewrites it (`$VAR`, aliases, legacy keys), and
//! deserializes [`crate::Config`] from it.

use std::fmt;

use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One YAML node after anchors, aliases and merge keys are resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Null,
    Bool(bool),
    Int(i64),
    /// Only integers above `i64::MAX`.
    UInt(u64),
    Float(f64),
    String(String),
    Seq(Vec<Node>),
    Map(Mapping),
}

/// A mapping in document order. Keys are text: YAML scalar keys (`1:`, `true:`) keep their
/// spelling as strings, which is what every typed section expects.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Mapping(Vec<(String, Node)>);

impl Mapping {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<Node> {
        let index = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(index).1)
    }

    /// Sets `key`, replacing an existing value in place or appending.
    pub(crate) fn insert(&mut self, key: impl Into<String>, value: Node) {
        let key = key.into();
        match self.get_mut(&key) {
            Some(slot) => *slot = value,
            None => self.0.push((key, value)),
        }
    }

    /// The value of `key`, inserting `default()` first when absent.
    pub(crate) fn entry_or_insert(
        &mut self,
        key: &str,
        default: impl FnOnce() -> Node,
    ) -> &mut Node {
        let index = match self.0.iter().position(|(k, _)| k == key) {
            Some(index) => index,
            None => {
                self.0.push((key.to_owned(), default()));
                self.0.len() - 1
            }
        };
        &mut self.0[index].1
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Node)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }
}

impl Node {
    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Node::Null)
    }

    /// The value of `key` when this is a mapping.
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(map) => map.get(key),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Map(map) => map.get_mut(key),
            _ => None,
        }
    }

    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            Node::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A scalar as key text (`1` → `"1"`); collections have none.
    fn key_text(self) -> Option<String> {
        match self {
            Node::String(s) => Some(s),
            Node::Int(i) => Some(i.to_string()),
            Node::UInt(u) => Some(u.to_string()),
            Node::Float(f) => Some(f.to_string()),
            Node::Bool(b) => Some(b.to_string()),
            Node::Null => Some("null".to_owned()),
            Node::Seq(_) | Node::Map(_) => None,
        }
    }
}

/// Options shared by every YAML read in this crate: one-line messages without snippets, merge
/// keys expanded, duplicate keys rejected (as YAML requires).
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        with_snippet: false,
        // Keep `.nan` / `.inf` as floats so the validator (not the parser) reports them.
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    }
}

/// Parses YAML text into a tree; an empty document is [`Node::Null`].
pub(crate) fn parse(text: &str) -> Result<Node, serde_saphyr::Error> {
    if text.trim().is_empty() {
        return Ok(Node::Null);
    }
    Ok(serde_saphyr::from_str_with_options::<Option<Node>>(text, options())?.unwrap_or(Node::Null))
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::UInt(v), Node::Int))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Node, D::Error> {
        Node::deserialize(de)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut out = Mapping::new();
        while let Some(key) = map.next_key::<Node>()? {
            let key = key
                .key_text()
                .ok_or_else(|| de::Error::custom("a mapping key must be a scalar"))?;
            let value = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Node::Map(out))
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(b) => s.serialize_bool(*b),
            Node::Int(i) => s.serialize_i64(*i),
            Node::UInt(u) => s.serialize_u64(*u),
            Node::Float(f) => s.serialize_f64(*f),
            Node::String(v) => s.serialize_str(v),
            Node::Seq(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Map(map) => {
                let mut out = s.serialize_map(Some(map.0.len()))?;
                for (k, v) in &map.0 {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
        }
    }
}

/// A type error found while deserializing a [`Node`] into the typed config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeError(String);

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NodeError {}

impl de::Error for NodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        NodeError(msg.to_string())
    }
}

impl<'de> IntoDeserializer<'de, NodeError> for Node {
    type Deserializer = Node;

    fn into_deserializer(self) -> Node {
        self
    }
}

impl<'de> Deserializer<'de> for Node {
    type Error = NodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, NodeError> {
        match self {
            Node::Null => visitor.visit_unit(),
            Node::Bool(b) => visitor.visit_bool(b),
            Node::Int(i) => visitor.visit_i64(i),
            Node::UInt(u) => visitor.visit_u64(u),
            Node::Float(f) => visitor.visit_f64(f),
            Node::String(s) => visitor.visit_string(s),
            Node::Seq(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter());
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Node::Map(map) => {
                let mut access = MapDeserializer::new(map.0.into_iter());
                let value = visitor.visit_map(&mut access)?;
                access.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, NodeError> {
        match self {
            Node::Null => visitor.visit_none(),
            other => visitor.visit_some(other),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, NodeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, NodeError> {
        match self {
            // `kind: tokens` — a unit variant by name.
            Node::String(s) => visitor.visit_enum(s.into_deserializer()),
            // `{variant: content}`.
            Node::Map(map) if map.0.len() == 1 => visitor.visit_enum(MapAccessDeserializer::new(
                MapDeserializer::new(map.0.into_iter()),
            )),
            other => other.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn floats_and_order_survive_the_tree() {
        let node = parse("b: .nan\na: .inf\n1: x\n").unwrap();
        let Node::Map(map) = &node else {
            panic!("not a map: {node:?}")
        };
        assert_eq!(map.keys().collect::<Vec<_>>(), ["b", "a", "1"]);
        assert!(matches!(map.get("b"), Some(Node::Float(f)) if f.is_nan()));
        assert_eq!(map.get("a"), Some(&Node::Float(f64::INFINITY)));
    }

    #[test]
    fn an_empty_document_is_null() {
        assert_eq!(parse("").unwrap(), Node::Null);
        assert_eq!(parse("# only a comment\n").unwrap(), Node::Null);
    }
}
