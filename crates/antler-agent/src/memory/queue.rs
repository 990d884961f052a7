//! The debounced memory queue (spec 40 §4.5): conversations wait here until the user pauses, so a
//! burst of turns costs one memory-model call, not one per turn.
//!
//! - An item's key is `(thread, user, agent)`. Enqueueing replaces a pending item with the same
//!   key and the same kind (normal vs. summarization flush): the newer conversation wins, the
//!   signals of both are kept. Normal and flush items coexist.
//! - `add` (re)starts the debounce timer; `add_nowait` (the summarization flush) fires it now.
//! - Backpressure: at `queue_max_depth` a *new* normal item without signals is refused (logged
//!   and dropped — never an error for the run); merges, signal-bearing items and flushes are
//!   always admitted.
//! - Processing takes every item at once and updates them one by one, pausing between items
//!   except while draining. A timer that fires while a worker runs sets a reprocess flag; the
//!   worker reschedules once if items remain.
//! - [`MemoryQueue::flush`] (shutdown) drains within a time budget and says whether everything
//!   was written. What does not fit in the budget is lost by design: the queue lives in memory,
//!   and the next turn re-feeds it because the watermark did not advance.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use antler_middleware::memory::preprocess::Signal;
use antler_protocol::Message;
use async_trait::async_trait;
use tokio::sync::watch;

/// One conversation waiting for extraction.
#[derive(Clone, Debug)]
pub struct QueueItem {
    pub thread_id: String,
    /// The run it came from (`None` for summarization flushes).
    pub run_id: Option<String>,
    /// Captured at enqueue (background work has no request context).
    pub user_id: Option<String>,
    pub agent_name: Option<String>,
    pub trace_id: Option<String>,
    /// The filtered conversation (user inputs and final replies).
    pub messages: Vec<Arc<Message>>,
    pub signals: BTreeSet<Signal>,
    /// A summarization flush: extract all of `messages`, leave the watermark alone.
    pub bypass_watermark: bool,
}

impl QueueItem {
    fn same_slot(&self, other: &QueueItem) -> bool {
        self.thread_id == other.thread_id
            && self.user_id == other.user_id
            && self.agent_name == other.agent_name
            && self.bypass_watermark == other.bypass_watermark
    }
}

/// What the queue hands each item to (the updater; a stub in tests).
#[async_trait]
pub trait ItemProcessor: Send + Sync {
    /// Update memory from one item; `false` = failed (already logged/journaled).
    async fn process(&self, item: &QueueItem) -> bool;
}

/// Queue settings.
#[derive(Clone, Debug)]
pub struct QueueSettings {
    /// `debounce_seconds`.
    pub debounce: Duration,
    /// `queue_max_depth`; 0 = unbounded.
    pub max_depth: usize,
    /// Pause between items of one batch (not while draining).
    pub pause: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            debounce: Duration::from_secs(30),
            max_depth: 1000,
            pause: Duration::from_millis(500),
        }
    }
}

/// Counters, published on every change (see [`MemoryQueue::subscribe`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub pending: usize,
    pub processing: bool,
    /// Items handed to the processor.
    pub processed: u64,
    /// Of those, how many failed.
    pub failed: u64,
    /// Items refused by backpressure.
    pub rejected: u64,
}

#[derive(Default)]
struct State {
    items: Vec<QueueItem>,
    timer: u64,
    processing: bool,
    reprocess: bool,
    draining: bool,
    stats: QueueStats,
}

struct Inner {
    state: Mutex<State>,
    processor: Arc<dyn ItemProcessor>,
    settings: QueueSettings,
    stats: watch::Sender<QueueStats>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the queue state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, state: &mut State) {
        state.stats.pending = state.items.len();
        state.stats.processing = state.processing;
        self.stats.send_replace(state.stats.clone());
    }
}

/// The debounced queue. Cheap to clone.
#[derive(Clone)]
pub struct MemoryQueue {
    inner: Arc<Inner>,
}

impl MemoryQueue {
    pub fn new(processor: Arc<dyn ItemProcessor>, settings: QueueSettings) -> Self {
        MemoryQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                processor,
                settings,
                stats: watch::Sender::new(QueueStats::default()),
            }),
        }
    }

    /// Queue a conversation and (re)start the debounce timer. `false` = refused (full).
    pub fn add(&self, item: QueueItem) -> bool {
        let delay = self.inner.settings.debounce;
        self.enqueue(item, delay)
    }

    /// Queue and process now (summarization flush). `false` = refused.
    pub fn add_nowait(&self, item: QueueItem) -> bool {
        self.enqueue(item, Duration::ZERO)
    }

    fn enqueue(&self, item: QueueItem, delay: Duration) -> bool {
        let mut st = self.inner.lock();
        if let Some(existing) = st.items.iter_mut().find(|i| i.same_slot(&item)) {
            let mut signals = std::mem::take(&mut existing.signals);
            signals.extend(item.signals.iter().copied());
            *existing = item;
            existing.signals = signals;
        } else {
            let max = self.inner.settings.max_depth;
            if max > 0 && st.items.len() >= max && !item.bypass_watermark && item.signals.is_empty()
            {
                st.stats.rejected += 1;
                self.inner.publish(&mut st);
                tracing::warn!(
                    thread = %item.thread_id,
                    depth = st.items.len(),
                    "memory queue is full; this conversation is not remembered"
                );
                return false;
            }
            st.items.push(item);
        }
        self.inner.publish(&mut st);
        drop(st);
        self.schedule(delay);
        true
    }

    /// (Re)start the timer: only the newest schedule fires.
    fn schedule(&self, delay: Duration) {
        let generation = {
            let mut st = self.inner.lock();
            st.timer += 1;
            st.timer
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime (a synchronous caller): the items wait for the next schedule or flush.
            return;
        };
        let queue = self.clone();
        handle.spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if queue.inner.lock().timer == generation {
                queue.process(false).await;
            }
        });
    }

    /// Take every item and update them in order. Returns whether all succeeded.
    async fn process(&self, drain: bool) -> bool {
        let items = {
            let mut st = self.inner.lock();
            if st.processing {
                st.reprocess = true;
                return true;
            }
            st.processing = true;
            let items = std::mem::take(&mut st.items);
            self.inner.publish(&mut st);
            items
        };
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let draining = drain || self.inner.lock().draining;
            if i > 0 && !draining && !self.inner.settings.pause.is_zero() {
                tokio::time::sleep(self.inner.settings.pause).await;
            }
            let done = self.inner.processor.process(item).await;
            let mut st = self.inner.lock();
            st.stats.processed += 1;
            if !done {
                st.stats.failed += 1;
                ok = false;
            }
            self.inner.publish(&mut st);
        }
        let again = {
            let mut st = self.inner.lock();
            st.processing = false;
            let again = st.reprocess && !st.items.is_empty() && !st.draining;
            st.reprocess = false;
            self.inner.publish(&mut st);
            again
        };
        if again {
            self.schedule(Duration::ZERO);
        }
        ok
    }

    /// Counters now.
    pub fn stats(&self) -> QueueStats {
        self.inner.stats.borrow().clone()
    }

    /// Watch the counters (tests wait on them instead of sleeping).
    pub fn subscribe(&self) -> watch::Receiver<QueueStats> {
        self.inner.stats.subscribe()
    }

    /// Drain now, within `timeout`: wait for an in-flight worker, then process what is left
    /// without pauses. `true` only if the queue ended empty with no failure during the flush.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let failed_before = {
            let mut st = self.inner.lock();
            st.timer += 1; // cancels a pending debounce timer
            st.draining = true;
            st.stats.failed
        };
        let queue = self.clone();
        // The drain runs as its own task: a timeout here abandons the wait, not an update
        // halfway through its write.
        let drain = tokio::spawn(async move {
            let mut rx = queue.subscribe();
            loop {
                if rx.wait_for(|s| !s.processing).await.is_err() {
                    return;
                }
                if queue.inner.lock().items.is_empty() {
                    return;
                }
                queue.process(true).await;
            }
        });
        let finished = tokio::time::timeout(timeout, drain).await.is_ok();
        let mut st = self.inner.lock();
        st.draining = false;
        let clean =
            finished && st.items.is_empty() && !st.processing && st.stats.failed == failed_before;
        if !clean {
            tracing::warn!(
                pending = st.items.len(),
                "memory flush did not finish cleanly within {timeout:?}"
            );
        }
        clean
    }
}
