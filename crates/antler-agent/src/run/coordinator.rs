//! The run coordinator: the seam between the run lifecycle and whatever decides, across
//! processes, which run holds a thread. Admission, leases (admit, heartbeat, release), the queue
//! (`enqueue`), and the cancel signal of the runs this process drives.
//!
//! Today's implementation is [`SqliteCoordinator`]: the leases of `antler-store` (one row per
//! run, renewed by its owner; see `antler_store::runs::admission`) plus an in-process table of
//! the live runs' cancel signals. A run displaced by another process learns it from its next
//! heartbeat; one displaced by this process is cancelled at once. The scale-out (Postgres +
//! Redis) implements the same trait a second time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_protocol::ThreadState;
use antler_runtime::CancellationToken;
use antler_store::runs::DEFAULT_LEASE;
use antler_store::{
    AdmitOptions, AdmitOutcome, BusyMark, Heartbeat, LeaseOwner, MultitaskStrategy, RunFinish,
    RunRecord, RunStatus, SqliteStore, StoreError,
};
use async_trait::async_trait;
use tokio::sync::watch;

use super::lock;

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

/// The cancel switch and completion of one run this process drives. Cloned freely; every clone
/// is the same run.
#[derive(Clone)]
pub struct RunSignal(Arc<SignalInner>);

struct SignalInner {
    run_id: String,
    thread_id: String,
    cancel: CancellationToken,
    action: Mutex<Option<CancelAction>>,
    done: watch::Sender<Option<RunStatus>>,
    /// The final state, for a waiter that asked for it (see [`RunSignal::want_final_state`]).
    final_state: Mutex<FinalState>,
}

/// The final state of a run, handed to a waiter that asked for it before the run finished.
#[derive(Default)]
enum FinalState {
    #[default]
    NotWanted,
    Wanted,
    Ready(Arc<ThreadState>),
}

impl RunSignal {
    /// A signal over `cancel` (the caller's token, e.g. Ctrl-C, or a fresh one).
    pub fn new(
        run_id: impl Into<String>,
        thread_id: impl Into<String>,
        cancel: CancellationToken,
    ) -> RunSignal {
        RunSignal(Arc::new(SignalInner {
            run_id: run_id.into(),
            thread_id: thread_id.into(),
            cancel,
            action: Mutex::new(None),
            done: watch::channel(None).0,
            final_state: Mutex::default(),
        }))
    }

    pub fn run_id(&self) -> &str {
        &self.0.run_id
    }

    pub fn thread_id(&self) -> &str {
        &self.0.thread_id
    }

    /// Ask the run to stop. A rollback request upgrades an earlier interrupt.
    pub fn cancel(&self, action: CancelAction) {
        {
            let mut a = lock(&self.0.action);
            if *a != Some(CancelAction::Rollback) {
                *a = Some(action);
            }
        }
        self.0.cancel.cancel();
    }

    pub fn token(&self) -> CancellationToken {
        self.0.cancel.clone()
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.cancel.is_cancelled()
    }

    /// What the canceller asked for (`None`: not cancelled through [`RunSignal::cancel`], e.g.
    /// the caller's own token fired — an interrupt).
    pub fn action(&self) -> Option<CancelAction> {
        *lock(&self.0.action)
    }

    /// The terminal status once the run has finished (everything persisted).
    pub fn finished(&self) -> Option<RunStatus> {
        *self.0.done.borrow()
    }

    /// Record the terminal status (the engine does, once the run is persisted).
    pub fn mark_done(&self, status: RunStatus) {
        self.0.done.send_replace(Some(status));
    }

    /// Ask the engine to hand over the run's final state when it succeeds (so a waiter need
    /// not read it back from the store). Asked too late, or for a run that does not succeed,
    /// nothing is handed over.
    pub fn want_final_state(&self) {
        let mut slot = lock(&self.0.final_state);
        if matches!(*slot, FinalState::NotWanted) {
            *slot = FinalState::Wanted;
        }
    }

    /// The engine: the state a successful run ended with, persisted as the thread's latest
    /// checkpoint; kept only if a waiter asked for it.
    pub(crate) fn offer_final_state(&self, state: &Arc<ThreadState>) {
        let mut slot = lock(&self.0.final_state);
        if matches!(*slot, FinalState::Wanted) {
            *slot = FinalState::Ready(state.clone());
        }
    }

    /// The final state handed over (once), if it was asked for in time and the run succeeded.
    pub fn take_final_state(&self) -> Option<Arc<ThreadState>> {
        match std::mem::take(&mut *lock(&self.0.final_state)) {
            FinalState::Ready(state) => Some(state),
            _ => None,
        }
    }

    /// Wait until the run has finished.
    pub async fn wait_done(&self) -> RunStatus {
        let mut rx = self.0.done.subscribe();
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

/// Decides which run holds a thread, across every process sharing it (see the module doc).
#[async_trait]
pub trait RunCoordinator: Send + Sync {
    /// Admit a run on its thread under `strategy`, atomically: `Started`, `Queued` behind live
    /// runs, or `Rejected`; the runs it displaced (`interrupt`/`rollback`) and orphans it
    /// reclaimed. The new run is leased to this process; a run that starts at once marks its
    /// thread `busy` (`busy`: the owner of a thread the mark creates) in the same step.
    async fn admit(
        &self,
        record: RunRecord,
        strategy: MultitaskStrategy,
        busy: BusyMark,
    ) -> Result<AdmitOutcome, StoreError>;

    /// Start a queued run once no earlier live run holds its thread (`None`: keep waiting),
    /// marking its thread `busy` in the same step.
    async fn try_start(
        &self,
        run_id: &str,
        busy: BusyMark,
    ) -> Result<Option<RunRecord>, StoreError>;

    /// Renew a run's lease; `Lost` when another process displaced or reclaimed it.
    async fn heartbeat(&self, run_id: &str) -> Result<Heartbeat, StoreError>;

    /// The terminal write, only while the lease is held (`None`: it was not; nothing written),
    /// and, when it wrote, the thread's record after it, in one transaction: `busy` while
    /// another live run holds the thread, else `thread_status`; the title set when `title` is
    /// `Some`.
    async fn release_with_thread(
        &self,
        run_id: &str,
        status: RunStatus,
        finish: RunFinish,
        thread_status: &str,
        title: Option<String>,
    ) -> Result<Option<RunRecord>, StoreError>;

    /// Mark the runs whose owners died or stopped renewing `error` (journaled).
    async fn reclaim(&self) -> Result<Vec<RunRecord>, StoreError>;

    /// The live (pending or running) runs of a thread, oldest first, whoever drives them.
    async fn active(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError>;

    /// How often a live run renews its lease.
    fn heartbeat_every(&self) -> Duration;

    /// Track a run this process drives (its cancel signal), until [`RunCoordinator::forget`].
    fn register(&self, signal: RunSignal);

    fn forget(&self, run_id: &str);

    /// The cancel signal of a run this process drives.
    fn local(&self, run_id: &str) -> Option<RunSignal>;
}

/// [`RunCoordinator`] over the SQLite leases of `antler-store`.
pub struct SqliteCoordinator {
    store: SqliteStore,
    owner: LeaseOwner,
    lease: Duration,
    live: Mutex<HashMap<String, RunSignal>>,
}

impl SqliteCoordinator {
    /// This process as the lease owner, 30 s leases.
    pub fn new(store: SqliteStore) -> SqliteCoordinator {
        SqliteCoordinator {
            store,
            owner: LeaseOwner::current().clone(),
            lease: DEFAULT_LEASE,
            live: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl RunCoordinator for SqliteCoordinator {
    async fn admit(
        &self,
        record: RunRecord,
        strategy: MultitaskStrategy,
        busy: BusyMark,
    ) -> Result<AdmitOutcome, StoreError> {
        let opts = AdmitOptions {
            strategy,
            owner: self.owner.clone(),
            lease: self.lease,
            mark_busy: Some(busy),
        };
        self.store.admit_run(record, opts).await
    }

    async fn try_start(
        &self,
        run_id: &str,
        busy: BusyMark,
    ) -> Result<Option<RunRecord>, StoreError> {
        self.store
            .try_start_run(run_id, &self.owner, self.lease, Some(busy))
            .await
    }

    async fn heartbeat(&self, run_id: &str) -> Result<Heartbeat, StoreError> {
        self.store
            .heartbeat_run(run_id, &self.owner, self.lease)
            .await
    }

    async fn release_with_thread(
        &self,
        run_id: &str,
        status: RunStatus,
        finish: RunFinish,
        thread_status: &str,
        title: Option<String>,
    ) -> Result<Option<RunRecord>, StoreError> {
        self.store
            .finish_run_and_thread(run_id, &self.owner, status, finish, thread_status, title)
            .await
    }

    async fn reclaim(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.store.reclaim_orphaned_runs(self.lease).await
    }

    async fn active(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.store.active_runs(thread_id).await
    }

    fn heartbeat_every(&self) -> Duration {
        self.lease / 3
    }

    fn register(&self, signal: RunSignal) {
        lock(&self.live).insert(signal.run_id().to_owned(), signal);
    }

    fn forget(&self, run_id: &str) {
        lock(&self.live).remove(run_id);
    }

    fn local(&self, run_id: &str) -> Option<RunSignal> {
        lock(&self.live).get(run_id).cloned()
    }
}
