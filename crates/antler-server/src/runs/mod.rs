//! This process's runs as the HTTP side sees them: each run's event buffer (for SSE replay and
//! joins) and cancel switch, which threads have a run or an operation (delete, state update) in
//! flight, and retention of finished runs' buffers for late joiners.
//!
//! Admission, leases, the multitask strategies, journaling and finishing are the run engine's
//! (`antler_agent::run`), shared with `antler run`: a CLI run and a server run on one database
//! exclude each other. After a run finishes its handle stays here for
//! [`RunManager::retention`] so late joiners can replay its events, then it is dropped (the run
//! record and checkpoints stay in the store). What finished runs hold together is bounded in
//! bytes: past the bound the oldest are dropped early, so memory does not grow with the rate
//! of runs × their history (a finished run's `values` snapshots are the last owners of its
//! messages).

pub mod body;
pub mod bus;
pub mod exec;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_agent::run::RunSignal;
use antler_protocol::checkpoint::Checkpointer;
use antler_protocol::ThreadState;
use antler_store::RunStatus;
use tokio_util::sync::CancellationToken;

#[cfg(test)]
use crate::sse::RunBuffer;
use crate::sse::SnapshotSource;
use bus::RunEvents;

pub use antler_agent::run::CancelAction;

/// A live (or recently finished) run of this process.
pub struct RunHandle {
    pub run_id: String,
    pub thread_id: String,
    /// The user the run belongs to.
    pub owner: String,
    pub buffer: Arc<dyn RunEvents>,
    signal: RunSignal,
}

impl RunHandle {
    pub fn new(
        owner: impl Into<String>,
        buffer: Arc<dyn RunEvents>,
        signal: RunSignal,
    ) -> Arc<RunHandle> {
        Arc::new(RunHandle {
            run_id: signal.run_id().to_owned(),
            thread_id: signal.thread_id().to_owned(),
            owner: owner.into(),
            buffer,
            signal,
        })
    }

    /// Ask the run to stop. A rollback request upgrades an earlier interrupt.
    pub fn cancel(&self, action: CancelAction) {
        self.signal.cancel(action);
    }

    pub fn cancel_token(&self) -> CancellationToken {
        self.signal.token()
    }

    pub fn is_cancelled(&self) -> bool {
        self.signal.is_cancelled()
    }

    pub fn cancel_action(&self) -> Option<CancelAction> {
        self.signal.action()
    }

    /// The terminal status once the run has finished (everything persisted).
    pub fn finished(&self) -> Option<RunStatus> {
        self.signal.finished()
    }

    /// The state a successful run ended with, if it was asked for in time (once).
    pub fn take_final_state(&self) -> Option<Arc<antler_protocol::ThreadState>> {
        self.signal.take_final_state()
    }

    /// Wait until the run has finished.
    pub async fn wait_done(&self) -> RunStatus {
        self.signal.wait_done().await
    }
}

/// Why a thread cannot take a run or an operation now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// A run is pending or running.
    RunInFlight,
    /// The thread is being deleted or its state updated.
    Operation,
}

#[derive(Default)]
struct Slot {
    active: Vec<Arc<RunHandle>>,
    op: bool,
}

impl Slot {
    /// Runs not yet finished (finished ones leave at their cleanup).
    fn live(&self) -> impl Iterator<Item = &Arc<RunHandle>> {
        self.active.iter().filter(|h| h.finished().is_none())
    }
}

#[derive(Default)]
struct Inner {
    runs: HashMap<String, Arc<RunHandle>>,
    threads: HashMap<String, Slot>,
    /// Finished runs still retained, oldest first, with what each holds.
    finished: VecDeque<(Arc<RunHandle>, usize)>,
    /// Sum of `finished`'s bytes.
    held: usize,
}

impl Inner {
    /// Stop retaining a finished run (unless a newer handle took its id).
    fn release(&mut self, handle: &Arc<RunHandle>) {
        if self
            .runs
            .get(&handle.run_id)
            .is_some_and(|cur| Arc::ptr_eq(cur, handle))
        {
            self.runs.remove(&handle.run_id);
        }
    }
}

/// All runs of this process.
pub struct RunManager {
    inner: Mutex<Inner>,
    retention: Duration,
    /// Bound on what finished runs hold together.
    max_held: usize,
    /// Where finished runs' `values` states are read back from (see [`RunBuffer::settle`]);
    /// `None` keeps them in memory.
    checkpoints: Option<Arc<dyn Checkpointer>>,
}

/// One thread's checkpoints as the source of a settled run's `values` events.
struct ThreadCheckpoints {
    store: Arc<dyn Checkpointer>,
    thread_id: String,
}

#[async_trait::async_trait]
impl SnapshotSource for ThreadCheckpoints {
    async fn state_at(&self, checkpoint_id: &str) -> Option<ThreadState> {
        match self.store.get(&self.thread_id, checkpoint_id).await {
            Ok(found) => found.map(|c| c.state),
            Err(e) => {
                tracing::warn!(thread = %self.thread_id, checkpoint = checkpoint_id, error = %e, "could not read a finished run's values event back");
                None
            }
        }
    }
}

/// Holds a thread busy for a non-run operation (delete, state update) until dropped.
pub struct OpGuard {
    manager: Arc<RunManager>,
    thread_id: String,
}

impl Drop for OpGuard {
    fn drop(&mut self) {
        let mut inner = self.manager.lock();
        if let Some(slot) = inner.threads.get_mut(&self.thread_id) {
            slot.op = false;
            if slot.active.is_empty() {
                inner.threads.remove(&self.thread_id);
            }
        }
    }
}

impl RunManager {
    /// `max_held`: bytes finished runs' buffers may hold together (the newest is always kept).
    /// `checkpoints`: the store runs checkpoint to; a finished run's `values` events are read
    /// back from it instead of kept in memory.
    pub fn new(
        retention: Duration,
        max_held: usize,
        checkpoints: Option<Arc<dyn Checkpointer>>,
    ) -> Arc<RunManager> {
        Arc::new(RunManager {
            inner: Mutex::new(Inner::default()),
            retention,
            max_held,
            checkpoints,
        })
    }

    /// Bytes the retained finished runs hold.
    pub fn held_bytes(&self) -> usize {
        self.lock().held
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// Whether an operation (delete, state update) holds the thread: runs wait for it.
    pub fn op_in_progress(&self, thread_id: &str) -> bool {
        self.lock().threads.get(thread_id).is_some_and(|s| s.op)
    }

    /// Track a run the engine admitted; once it has finished, its buffer stays replayable for
    /// the retention period.
    pub fn track(self: &Arc<Self>, handle: &Arc<RunHandle>) {
        {
            let mut inner = self.lock();
            inner
                .threads
                .entry(handle.thread_id.clone())
                .or_default()
                .active
                .push(handle.clone());
            inner.runs.insert(handle.run_id.clone(), handle.clone());
        }
        let me = Arc::downgrade(self);
        let h = handle.clone();
        tokio::spawn(async move {
            h.wait_done().await;
            if let Some(m) = me.upgrade() {
                m.finish(&h);
            }
        });
    }

    /// The run left its thread; its events stay replayable for the retention period.
    fn finish(self: &Arc<Self>, handle: &Arc<RunHandle>) {
        if let Some(store) = &self.checkpoints {
            handle.buffer.settle(Arc::new(ThreadCheckpoints {
                store: store.clone(),
                thread_id: handle.thread_id.clone(),
            }));
        }
        let cost = handle.buffer.held_bytes();
        {
            let mut inner = self.lock();
            if let Some(slot) = inner.threads.get_mut(&handle.thread_id) {
                slot.active.retain(|h| !Arc::ptr_eq(h, handle));
                if slot.active.is_empty() && !slot.op {
                    inner.threads.remove(&handle.thread_id);
                }
            }
            inner.finished.push_back((handle.clone(), cost));
            inner.held += cost;
            tracing::debug!(run = %handle.run_id, bytes = cost, held = inner.held, "finished run retained");
            while inner.held > self.max_held && inner.finished.len() > 1 {
                let Some((old, bytes)) = inner.finished.pop_front() else {
                    break;
                };
                inner.held -= bytes;
                inner.release(&old);
            }
        }
        let me = Arc::downgrade(self);
        // Weak: a run the byte bound released early must not stay alive through its timer.
        let h = Arc::downgrade(handle);
        let retention = self.retention;
        tokio::spawn(async move {
            tokio::time::sleep(retention).await;
            let Some(h) = h.upgrade() else {
                return;
            };
            if let Some(m) = me.upgrade() {
                let mut inner = m.lock();
                // Still queued unless the byte bound released it already.
                if let Some(i) = inner.finished.iter().position(|(x, _)| Arc::ptr_eq(x, &h)) {
                    if let Some((_, bytes)) = inner.finished.remove(i) {
                        inner.held -= bytes;
                    }
                    inner.release(&h);
                }
            }
        });
    }

    pub fn get(&self, run_id: &str) -> Option<Arc<RunHandle>> {
        self.lock().runs.get(run_id).cloned()
    }

    /// Whether the thread has a pending or running run (or an operation) here.
    pub fn is_busy(&self, thread_id: &str) -> bool {
        self.lock()
            .threads
            .get(thread_id)
            .is_some_and(|s| s.op || s.live().next().is_some())
    }

    /// Runs of the thread not yet finished.
    pub fn active_on(&self, thread_id: &str) -> Vec<Arc<RunHandle>> {
        self.lock()
            .threads
            .get(thread_id)
            .map(|s| s.live().cloned().collect())
            .unwrap_or_default()
    }

    /// Mark the thread busy for an operation; fails while a run or another operation is on it.
    pub fn begin_op(self: &Arc<Self>, thread_id: &str) -> Result<OpGuard, Busy> {
        let mut inner = self.lock();
        let slot = inner.threads.entry(thread_id.to_owned()).or_default();
        if slot.op {
            return Err(Busy::Operation);
        }
        if slot.live().next().is_some() {
            return Err(Busy::RunInFlight);
        }
        slot.op = true;
        Ok(OpGuard {
            manager: self.clone(),
            thread_id: thread_id.to_owned(),
        })
    }

    /// Forget the retained runs of a deleted thread.
    pub fn forget_thread(&self, thread_id: &str) {
        self.lock().runs.retain(|_, h| h.thread_id != thread_id);
    }

    /// Runs pending or running in this process.
    pub fn live_count(&self) -> usize {
        self.lock().threads.values().map(|s| s.live().count()).sum()
    }

    /// Runs whose handles (and buffers) are held, live or retained.
    pub fn held_count(&self) -> usize {
        self.lock().runs.len()
    }

    /// Cancel every live run (server shutdown).
    pub fn cancel_all(&self) {
        for slot in self.lock().threads.values() {
            for h in slot.live() {
                h.cancel(CancelAction::Interrupt);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn handle(run: &str, thread: &str) -> Arc<RunHandle> {
        let signal = RunSignal::new(run, thread, CancellationToken::new());
        RunHandle::new("u", RunBuffer::new(run, 1 << 20), signal)
    }

    #[tokio::test]
    async fn operations_and_runs_exclude_each_other() {
        let m = RunManager::new(Duration::from_secs(60), usize::MAX, None);
        let guard = m.begin_op("t").unwrap();
        assert_eq!(m.begin_op("t").err(), Some(Busy::Operation));
        assert!(m.op_in_progress("t"));
        drop(guard);
        assert!(!m.op_in_progress("t"));
        let a = handle("a", "t");
        m.track(&a);
        assert_eq!(m.begin_op("t").err(), Some(Busy::RunInFlight));
        assert!(m.is_busy("t"));
        a.signal.mark_done(RunStatus::Success);
        // Finished runs no longer hold the thread, even before their cleanup ran.
        assert!(!m.is_busy("t"));
        assert!(m.begin_op("t").is_ok());
        assert!(m.get("a").is_some(), "retained for joins");
    }

    #[tokio::test(start_paused = true)]
    async fn finished_runs_are_released_after_retention() {
        let m = RunManager::new(Duration::from_secs(60), usize::MAX, None);
        let a = handle("a", "t");
        m.track(&a);
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.wait_done().await })
        };
        a.signal.mark_done(RunStatus::Interrupted);
        assert_eq!(waiter.await.unwrap(), RunStatus::Interrupted);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(m.held_count(), 1);
        assert_eq!(m.live_count(), 0);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(m.held_count(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn finished_runs_beyond_the_byte_bound_are_released_oldest_first() {
        use antler_protocol::{Message, StateUpdate, ThreadState};
        let mut state = ThreadState::default();
        state
            .apply(StateUpdate::messages(vec![Message::human(
                "m".repeat(4000),
            )]))
            .unwrap();
        let state = Arc::new(state);
        // Each run holds its framed event and the message its snapshot keeps alive (~5 KB).
        let m = RunManager::new(Duration::from_secs(60), 12_000, None);
        let mut weak = Vec::new();
        for run in ["a", "b", "c"] {
            let h = handle(run, run);
            h.buffer.publish(crate::sse::Kind::Updates, "updates", "{}");
            h.buffer.publish_values(state.snapshot());
            m.track(&h);
            h.signal.mark_done(RunStatus::Success);
            weak.push(Arc::downgrade(&h));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(m.get("a").is_none(), "the oldest went first");
        assert!(weak[0].upgrade().is_none(), "and its buffer was freed");
        assert!(m.get("b").is_some() && m.get("c").is_some());
        assert!(m.held_bytes() > 9_000 && m.held_bytes() <= 12_000);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!((m.held_count(), m.held_bytes()), (0, 0));
    }
}
