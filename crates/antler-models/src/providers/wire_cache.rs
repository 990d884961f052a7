//! Each message's request encoding, kept while the message lives.
//!
//! A thread's whole history goes out again with every model call, and serializing it was the
//! one part of a step that grew with the history (about 0.5 ms per call at 1,000 messages). A
//! message in a thread is immutable behind its `Arc` — a change replaces the `Arc` — so its
//! encoding can be made once and copied into every later request body.
//!
//! Slots are keyed by the message's address and hold a `Weak` of it: while the slot exists the
//! allocation cannot be reused, so an address that matches is the same message; a message that
//! was changed in place through `Arc::make_mut` moved to a new allocation and misses.
//! The cache is bounded in bytes; slots of messages no longer alive are swept as it grows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use antler_protocol::Message;
use serde_json::value::RawValue;

/// Most bytes of encodings kept. Past it, slots of dead messages go first, then all of them.
const MAX_BYTES: usize = 4 << 20;
/// Slots beyond 1.5 times the live ones (plus this) trigger a sweep of dead messages' slots: a
/// dead message's slot keeps its allocation (the `Weak`) and its encoding until swept.
const SWEEP_SLACK: usize = 512;

/// Encodings of one wire format with one set of options (one model's).
#[derive(Default)]
pub struct WireCache {
    inner: Mutex<Slots>,
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("WireCache")
            .field("slots", &s.slots.len())
            .field("bytes", &s.bytes)
            .finish()
    }
}

#[derive(Default)]
pub(crate) struct Slots {
    slots: HashMap<usize, Slot>,
    bytes: usize,
    sweep_at: usize,
}

struct Slot {
    message: Weak<Message>,
    json: Box<RawValue>,
}

impl WireCache {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Slots> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Messages with an encoding kept (tests, diagnostics).
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of encodings kept.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

impl Slots {
    /// The encoding of `m`: the kept one, or `encode`'s (then kept).
    pub(crate) fn get_or_encode(
        &mut self,
        m: &Arc<Message>,
        encode: impl FnOnce() -> Result<String, serde_json::Error>,
    ) -> Result<&RawValue, serde_json::Error> {
        let key = Arc::as_ptr(m) as usize;
        let hit = self
            .slots
            .get(&key)
            .is_some_and(|s| std::ptr::eq(s.message.as_ptr(), Arc::as_ptr(m)));
        if !hit {
            let json = RawValue::from_string(encode()?)?;
            self.bytes += json.get().len();
            if let Some(old) = self.slots.insert(
                key,
                Slot {
                    message: Arc::downgrade(m),
                    json,
                },
            ) {
                self.bytes -= old.json.get().len();
            }
            self.bound(key);
        }
        match self.slots.get(&key) {
            Some(slot) => Ok(&slot.json),
            // `bound` keeps the slot just made (it cleared everything else).
            None => Err(serde_json::Error::io(std::io::Error::other(
                "wire cache slot vanished",
            ))),
        }
    }

    /// Keep the cache within its bounds; `keep` (the slot just made) always stays.
    fn bound(&mut self, keep: usize) {
        if self.slots.len() < self.sweep_at && self.bytes <= MAX_BYTES {
            return;
        }
        self.slots.retain(|_, s| s.message.strong_count() > 0);
        if self.bytes_now() > MAX_BYTES {
            let kept = self.slots.remove(&keep);
            self.slots.clear();
            if let Some(k) = kept {
                self.slots.insert(keep, k);
            }
        }
        self.bytes = self.bytes_now();
        self.sweep_at = self.slots.len() + self.slots.len() / 2 + SWEEP_SLACK;
    }

    fn bytes_now(&self) -> usize {
        self.slots.values().map(|s| s.json.get().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(m: &Message) -> Result<String, serde_json::Error> {
        serde_json::to_string(&m.text())
    }

    #[test]
    fn a_message_is_encoded_once_while_it_lives() {
        let cache = WireCache::default();
        let a = Arc::new(Message::human("alpha"));
        let mut calls = 0;
        for _ in 0..3 {
            let mut slots = cache.lock();
            let raw = slots
                .get_or_encode(&a, || {
                    calls += 1;
                    encoded(&a)
                })
                .map(|r| r.get().to_owned());
            assert_eq!(raw.ok().as_deref(), Some("\"alpha\""));
        }
        assert_eq!(calls, 1);
        // An equal message elsewhere is another message: encoded on its own.
        let b = Arc::new(Message::human("alpha"));
        let mut slots = cache.lock();
        let mut again = false;
        let _ = slots.get_or_encode(&b, || {
            again = true;
            encoded(&b)
        });
        assert!(again);
        drop(slots);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.bytes(), 2 * "\"alpha\"".len());
    }

    #[test]
    fn a_message_changed_through_make_mut_is_encoded_again() {
        let cache = WireCache::default();
        let mut a = Arc::new(Message::human("before"));
        let _ = cache.lock().get_or_encode(&a, || encoded(&a));
        // The only strong reference: make_mut changes the message without cloning it, moving it
        // away from the allocation the cache's Weak holds.
        if let Message::Human(h) = Arc::make_mut(&mut a) {
            h.content = "after".into();
        }
        let raw = cache
            .lock()
            .get_or_encode(&a, || encoded(&a))
            .map(|r| r.get().to_owned());
        assert_eq!(raw.ok().as_deref(), Some("\"after\""));
    }

    #[test]
    fn slots_of_dead_messages_are_swept_as_the_cache_grows() {
        let cache = WireCache::default();
        let live: Vec<Arc<Message>> = (0..10)
            .map(|i| Arc::new(Message::human(format!("live {i}"))))
            .collect();
        for m in &live {
            let _ = cache.lock().get_or_encode(m, || encoded(m));
        }
        for i in 0..3 * SWEEP_SLACK {
            let m = Arc::new(Message::human(format!("gone {i}")));
            let _ = cache.lock().get_or_encode(&m, || encoded(&m));
        }
        // Every dead message's slot was swept at some point: what is left is bounded by the
        // live ones and the slack, not by everything ever sent.
        assert!(
            cache.len() <= 2 * live.len() + SWEEP_SLACK,
            "{}",
            cache.len()
        );
        let mut slots = cache.lock();
        for m in &live {
            let mut miss = false;
            let _ = slots.get_or_encode(m, || {
                miss = true;
                encoded(m)
            });
            assert!(!miss, "a live message's encoding was dropped by a sweep");
        }
    }
}
