//! Admission: one [`MultitaskStrategy`] (reject | interrupt | rollback | enqueue) over the
//! coordinator's one lease scheme, so a CLI run and a server run on the same thread exclude each
//! other exactly as two runs of one process do.
//!
//! - `reject`: a live run holds the thread → [`AgentError::ThreadBusy`], nothing written.
//! - `interrupt` / `rollback`: the coordinator stops the live runs (`interrupted`, resp. `error`
//!   "Rolled back by user") and starts the new one in one step. Displaced runs of this process
//!   are cancelled at once and the new run waits until they have finished writing; those of
//!   other processes stop at their next heartbeat. `rollback` then starts the new run from the
//!   displaced run's rollback point (the head before it began).
//! - `enqueue`: the new run is `pending` until the runs ahead of it end (FIFO), its lease kept
//!   alive meanwhile; cancelling it while it waits ends it `interrupted` without running.

use std::sync::Arc;

use antler_store::{
    Admission, AdmitOutcome, BusyMark, MultitaskStrategy, RunRecord, ThreadRecord, ThreadUpdate,
};
use serde_json::Value;

use super::coordinator::{RunCoordinator, RunSignal};
use crate::{AgentError, App};

/// Where the rollback point of a run is recorded on its record (`kwargs`; older records: metadata).
pub(crate) const ROLLBACK_POINT: &str = "rollback_checkpoint_id";

/// The checkpoint a run displaced by `rollback` restores: its recorded rollback point.
pub(crate) fn rollback_point(run: &RunRecord) -> Option<String> {
    run.kwargs
        .get(ROLLBACK_POINT)
        .or_else(|| run.metadata.get(ROLLBACK_POINT))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The admitted run, before it may start.
pub(crate) struct Admitted {
    pub record: RunRecord,
    pub queued: bool,
    /// Runs of this process the admission displaced: the new run starts once they finished.
    pub wait_for: Vec<RunSignal>,
    /// `rollback`: start from this checkpoint.
    pub from_checkpoint: Option<String>,
}

/// Admit `record` under `strategy` (see the module doc).
pub(crate) async fn admit(
    coordinator: &Arc<dyn RunCoordinator>,
    record: RunRecord,
    strategy: MultitaskStrategy,
    user_id: Option<&str>,
) -> Result<Admitted, AgentError> {
    let thread_id = record.thread_id.clone();
    let busy = BusyMark {
        owner: user_id.map(str::to_owned),
    };
    let AdmitOutcome {
        admission,
        displaced,
        reclaimed,
    } = coordinator.admit(record, strategy, busy).await?;
    for r in &reclaimed {
        tracing::warn!(run = %r.run_id, thread = %thread_id, "an earlier run of this thread was orphaned (its process exited); marked error");
    }
    let (record, queued) = match admission {
        Admission::Rejected { active } => {
            return Err(AgentError::ThreadBusy {
                thread: thread_id,
                run: active.run_id,
            })
        }
        Admission::Queued(r) => (r, true),
        Admission::Started(r) => (r, false),
    };
    let mut wait_for = Vec::new();
    for d in &displaced {
        if let Some(signal) = coordinator.local(&d.run_id) {
            // Its status is already recorded; this only stops it (it must not restore anything:
            // the new run starts from the rollback point itself).
            signal.cancel(super::CancelAction::Interrupt);
            wait_for.push(signal);
        }
    }
    let from_checkpoint = match strategy {
        MultitaskStrategy::Rollback => displaced.first().and_then(rollback_point),
        MultitaskStrategy::Reject | MultitaskStrategy::Interrupt | MultitaskStrategy::Enqueue => {
            None
        }
    };
    Ok(Admitted {
        record,
        queued,
        wait_for,
        from_checkpoint,
    })
}

/// Wait until a queued run may start (its thread marked busy as it does, `user_id` the owner of
/// a thread the mark creates). `false` when it was cancelled while waiting.
pub(crate) async fn wait_turn(
    coordinator: &Arc<dyn RunCoordinator>,
    signal: &RunSignal,
    user_id: Option<&str>,
) -> Result<bool, AgentError> {
    let cancel = signal.token();
    loop {
        if cancel.is_cancelled() {
            return Ok(false);
        }
        let busy = BusyMark {
            owner: user_id.map(str::to_owned),
        };
        if coordinator
            .try_start(signal.run_id(), busy)
            .await?
            .is_some()
        {
            return Ok(true);
        }
        if let Err(e) = coordinator.heartbeat(signal.run_id()).await {
            tracing::warn!(run = %signal.run_id(), error = %e, "could not renew the queued run's lease");
        }
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

impl App {
    /// Startup recovery: mark runs whose process died (or whose lease expired) `error`, journal
    /// them, and set their threads' status to `error`. Runs of live processes — other `antler`
    /// processes, a server — are left alone.
    pub async fn reclaim_orphaned_runs(&self) -> Result<Vec<RunRecord>, AgentError> {
        let reclaimed = self.runs.reclaim().await?;
        for r in &reclaimed {
            let update = ThreadUpdate {
                status: Some(ThreadRecord::ERROR.into()),
                ..Default::default()
            };
            if let Err(e) = self.store.update_thread(&r.thread_id, update).await {
                tracing::debug!(thread = %r.thread_id, error = %e, "no thread record to mark");
            }
        }
        Ok(reclaimed)
    }

    /// A server's start-up recovery: [`App::reclaim_orphaned_runs`], then runs written without a
    /// lease left `pending`/`running` become `error` with `stop_reason: orphan_recovered`, and
    /// threads left `busy` with no live run become `error`. Returns `(runs, threads)` fixed.
    pub async fn reconcile_runs(&self) -> Result<(usize, usize), AgentError> {
        let reclaimed = self.reclaim_orphaned_runs().await?.len();
        let unleased = self
            .store
            .mark_unleased_unfinished_runs(antler_store::RunStatus::Error, Some("orphan_recovered"))
            .await?;
        let busy = self
            .store
            .list_threads(antler_store::ThreadQuery {
                limit: usize::MAX >> 1,
                offset: 0,
                owner: None,
                status: Some(ThreadRecord::BUSY.to_owned()),
            })
            .await?;
        let mut threads = 0;
        for t in busy {
            if !self.runs.active(&t.thread_id).await?.is_empty() {
                continue;
            }
            let update = ThreadUpdate {
                status: Some(ThreadRecord::ERROR.to_owned()),
                ..Default::default()
            };
            self.store.update_thread(&t.thread_id, update).await?;
            threads += 1;
        }
        let runs = reclaimed + unleased;
        if runs > 0 || threads > 0 {
            tracing::warn!(
                runs,
                threads,
                "marked runs left unfinished by a previous process as error"
            );
        }
        Ok((runs, threads))
    }
}
