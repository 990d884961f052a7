//! The in-process run manager: which runs are live on which thread, their cancel switches and
//! event buffers, and the multitask rules (spec 70 §5.3) applied atomically at admission.
//!
//! A run is admitted under one lock: if its thread already has a pending/running run (or is being
//! deleted or state-updated) the strategy decides — `reject` refuses, `interrupt`/`rollback`
//! cancel the old runs and the new one waits for them to finalize. After a run finalizes its
//! handle stays here for [`RunManager::retention`] so late joiners can replay its events, then it
//! is dropped (the run record and checkpoints stay in the store).
//!
//! Only this process's runs are known here; a second server process on the same database is not
//! coordinated with (see the crate docs).

pub mod body;
pub mod exec;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_store::RunStatus;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::sse::RunBuffer;

/// `action` of a cancel (spec 70 §5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelAction {
    /// Stop, keep what was committed; the run ends `interrupted`.
    Interrupt,
    /// Stop and restore the thread to its pre-run state; the run ends `error`.
    Rollback,
}

impl CancelAction {
    pub fn parse(s: &str) -> Option<CancelAction> {
        match s {
            "interrupt" => Some(CancelAction::Interrupt),
            "rollback" => Some(CancelAction::Rollback),
            _ => None,
        }
    }
}

/// `multitask_strategy` (spec 70 §5.3; `enqueue` is refused at parse time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Reject,
    Interrupt,
    Rollback,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Reject => "reject",
            Strategy::Interrupt => "interrupt",
            Strategy::Rollback => "rollback",
        }
    }
}

/// A live (or recently finished) run of this process.
pub struct RunHandle {
    pub run_id: String,
    pub thread_id: String,
    /// The user the run belongs to.
    pub owner: String,
    pub buffer: Arc<RunBuffer>,
    cancel: CancellationToken,
    action: Mutex<Option<CancelAction>>,
    done: watch::Sender<Option<RunStatus>>,
}

impl RunHandle {
    pub fn new(
        run_id: impl Into<String>,
        thread_id: impl Into<String>,
        owner: impl Into<String>,
        buffer_bytes: usize,
    ) -> Arc<RunHandle> {
        let run_id = run_id.into();
        Arc::new(RunHandle {
            buffer: RunBuffer::new(run_id.clone(), buffer_bytes),
            run_id,
            thread_id: thread_id.into(),
            owner: owner.into(),
            cancel: CancellationToken::new(),
            action: Mutex::new(None),
            done: watch::channel(None).0,
        })
    }

    /// Ask the run to stop. A rollback request upgrades an earlier interrupt.
    pub fn cancel(&self, action: CancelAction) {
        if let Ok(mut a) = self.action.lock() {
            if *a != Some(CancelAction::Rollback) {
                *a = Some(action);
            }
        }
        self.cancel.cancel();
    }

    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    pub fn cancel_action(&self) -> Option<CancelAction> {
        self.action.lock().ok().and_then(|a| *a)
    }

    /// The terminal status once the run has finalized (everything persisted).
    pub fn finished(&self) -> Option<RunStatus> {
        *self.done.borrow()
    }

    pub(crate) fn mark_done(&self, status: RunStatus) {
        self.done.send_replace(Some(status));
    }

    /// Wait until the run has finalized.
    pub async fn wait_done(&self) -> RunStatus {
        let mut rx = self.done.subscribe();
        loop {
            if let Some(s) = *rx.borrow_and_update() {
                return s;
            }
            if rx.changed().await.is_err() {
                return RunStatus::Error;
            }
        }
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

#[derive(Default)]
struct Inner {
    runs: HashMap<String, Arc<RunHandle>>,
    threads: HashMap<String, Slot>,
}

/// All runs of this process.
pub struct RunManager {
    inner: Mutex<Inner>,
    retention: Duration,
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
    pub fn new(retention: Duration) -> Arc<RunManager> {
        Arc::new(RunManager {
            inner: Mutex::new(Inner::default()),
            retention,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// Admit `handle` on its thread under `strategy`. Returns the runs it must wait for (those
    /// it interrupted), or why it cannot run.
    pub fn admit(
        &self,
        handle: &Arc<RunHandle>,
        strategy: Strategy,
    ) -> Result<Vec<Arc<RunHandle>>, Busy> {
        let mut inner = self.lock();
        let slot = inner.threads.entry(handle.thread_id.clone()).or_default();
        if slot.op {
            return Err(Busy::Operation);
        }
        let previous: Vec<Arc<RunHandle>> = slot.active.clone();
        if !previous.is_empty() {
            match strategy {
                Strategy::Reject => return Err(Busy::RunInFlight),
                Strategy::Interrupt => previous
                    .iter()
                    .for_each(|h| h.cancel(CancelAction::Interrupt)),
                Strategy::Rollback => previous
                    .iter()
                    .for_each(|h| h.cancel(CancelAction::Rollback)),
            }
        }
        slot.active.push(handle.clone());
        inner.runs.insert(handle.run_id.clone(), handle.clone());
        Ok(previous)
    }

    /// Undo an admission whose run never started (its record could not be written).
    pub fn withdraw(&self, handle: &Arc<RunHandle>) {
        let mut inner = self.lock();
        inner.runs.remove(&handle.run_id);
        if let Some(slot) = inner.threads.get_mut(&handle.thread_id) {
            slot.active.retain(|h| !Arc::ptr_eq(h, handle));
            if slot.active.is_empty() && !slot.op {
                inner.threads.remove(&handle.thread_id);
            }
        }
    }

    /// The run left its thread; its events stay replayable for the retention period.
    pub fn finish(self: &Arc<Self>, handle: &Arc<RunHandle>) {
        {
            let mut inner = self.lock();
            if let Some(slot) = inner.threads.get_mut(&handle.thread_id) {
                slot.active.retain(|h| !Arc::ptr_eq(h, handle));
                if slot.active.is_empty() && !slot.op {
                    inner.threads.remove(&handle.thread_id);
                }
            }
        }
        let me = Arc::downgrade(self);
        let h = handle.clone();
        let retention = self.retention;
        tokio::spawn(async move {
            tokio::time::sleep(retention).await;
            if let Some(m) = me.upgrade() {
                let mut inner = m.lock();
                if inner
                    .runs
                    .get(&h.run_id)
                    .is_some_and(|cur| Arc::ptr_eq(cur, &h))
                {
                    inner.runs.remove(&h.run_id);
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
            .is_some_and(|s| s.op || !s.active.is_empty())
    }

    /// Runs of the thread not yet finalized.
    pub fn active_on(&self, thread_id: &str) -> Vec<Arc<RunHandle>> {
        self.lock()
            .threads
            .get(thread_id)
            .map(|s| s.active.clone())
            .unwrap_or_default()
    }

    /// Mark the thread busy for an operation; fails while a run or another operation is on it.
    pub fn begin_op(self: &Arc<Self>, thread_id: &str) -> Result<OpGuard, Busy> {
        let mut inner = self.lock();
        let slot = inner.threads.entry(thread_id.to_owned()).or_default();
        if slot.op {
            return Err(Busy::Operation);
        }
        if !slot.active.is_empty() {
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
        self.lock().threads.values().map(|s| s.active.len()).sum()
    }

    /// Runs whose handles (and buffers) are held, live or retained.
    pub fn held_count(&self) -> usize {
        self.lock().runs.len()
    }

    /// Cancel every live run (server shutdown).
    pub fn cancel_all(&self) {
        for slot in self.lock().threads.values() {
            for h in &slot.active {
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
        RunHandle::new(run, thread, "u", 1 << 20)
    }

    #[tokio::test]
    async fn reject_interrupt_and_rollback_at_admission() {
        let m = RunManager::new(Duration::from_secs(60));
        let a = handle("a", "t");
        assert!(m.admit(&a, Strategy::Reject).unwrap().is_empty());
        let b = handle("b", "t");
        assert_eq!(m.admit(&b, Strategy::Reject).err(), Some(Busy::RunInFlight));
        assert!(!a.is_cancelled());
        let c = handle("c", "t");
        let waits = m.admit(&c, Strategy::Interrupt).unwrap();
        assert_eq!(waits.len(), 1);
        assert!(a.is_cancelled());
        assert_eq!(a.cancel_action(), Some(CancelAction::Interrupt));
        let d = handle("d", "t");
        m.admit(&d, Strategy::Rollback).unwrap();
        assert_eq!(a.cancel_action(), Some(CancelAction::Rollback));
        assert_eq!(c.cancel_action(), Some(CancelAction::Rollback));
        // Other threads are independent.
        assert!(m.admit(&handle("e", "t2"), Strategy::Reject).is_ok());
    }

    #[tokio::test]
    async fn operations_and_runs_exclude_each_other() {
        let m = RunManager::new(Duration::from_secs(60));
        let guard = m.begin_op("t").unwrap();
        assert_eq!(m.begin_op("t").err(), Some(Busy::Operation));
        assert_eq!(
            m.admit(&handle("a", "t"), Strategy::Interrupt).err(),
            Some(Busy::Operation)
        );
        drop(guard);
        let a = handle("a", "t");
        m.admit(&a, Strategy::Reject).unwrap();
        assert_eq!(m.begin_op("t").err(), Some(Busy::RunInFlight));
        assert!(m.is_busy("t"));
        a.mark_done(RunStatus::Success);
        m.finish(&a);
        assert!(!m.is_busy("t"));
        assert!(m.begin_op("t").is_ok());
        assert!(m.get("a").is_some(), "retained for joins");
    }

    #[tokio::test(start_paused = true)]
    async fn finished_runs_are_released_after_retention() {
        let m = RunManager::new(Duration::from_secs(60));
        let a = handle("a", "t");
        m.admit(&a, Strategy::Reject).unwrap();
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.wait_done().await })
        };
        a.mark_done(RunStatus::Interrupted);
        assert_eq!(waiter.await.unwrap(), RunStatus::Interrupted);
        m.finish(&a);
        assert_eq!(m.held_count(), 1);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(m.held_count(), 0);
    }
}
