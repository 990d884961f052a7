//! Admission: one active run per thread, across every process sharing the database.
//!
//! [`SqliteStore::admit_run`] is atomic per thread: it reclaims orphans (runs whose lease
//! expired or whose owner process is gone: marked `error` and journaled), then applies DeerFlow's
//! multitask strategy against the live runs — `reject` refuses, `interrupt` and `rollback` stop
//! the old run (`interrupted`, resp. `error` "Rolled back by user") and start the new one in the
//! same transaction, `enqueue` records the new run `pending` behind them. So at most one run per
//! thread is `running` at any time.
//!
//! While it runs, the owner renews its lease ([`SqliteStore::heartbeat_run`]); a heartbeat that
//! finds the row no longer held (another process interrupted it) tells the owner to stop. The
//! terminal status goes through [`SqliteStore::finish_run_and_thread`], which only the lease
//! holder can do: a process that lost its run never overwrites what the new owner recorded.

use std::time::Duration;

use rusqlite::params;
use serde_json::{Map, Value};

use super::{
    get_tx, insert_tx, query_runs, set_usage_tx, update_one, EncodedRun, RunRecord, RunStatus,
    RunUsage, COLUMNS,
};
use crate::db::Cx;
use crate::error::StoreError;
use crate::journal::{append_tx, has_event_tx, NewRunEvent};
use crate::lease::LeaseOwner;
use crate::threads::mark_busy_tx;
use crate::{now, SqliteStore};

pub use antler_protocol::checkpoint::MultitaskStrategy;

/// The error text of a run rolled back by a newer one (DeerFlow's wording).
pub const ROLLED_BACK: &str = "Rolled back by user";

/// The error text of a reclaimed orphan.
pub const ORPHANED: &str =
    "run did not finish: the process driving it exited (crash or kill) or stopped renewing its lease";

/// How a run is admitted: the strategy and the lease it runs under.
#[derive(Clone, Debug)]
pub struct AdmitOptions {
    pub strategy: MultitaskStrategy,
    pub owner: LeaseOwner,
    /// How long the lease holds without a heartbeat.
    pub lease: Duration,
    /// Mark the thread `busy` in the same commit when the run starts at once (as
    /// [`SqliteStore::mark_thread_busy`] would, with this owner for a thread it creates). A run
    /// that is queued instead is marked by the [`SqliteStore::try_start_run`] that starts it.
    pub mark_busy: Option<BusyMark>,
}

/// See [`AdmitOptions::mark_busy`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BusyMark {
    /// The owner recorded on a thread created by the mark (an existing thread keeps its own).
    pub owner: Option<String>,
}

impl AdmitOptions {
    /// This process, a 30 s lease, the thread's status left alone.
    pub fn new(strategy: MultitaskStrategy) -> Self {
        AdmitOptions {
            strategy,
            owner: LeaseOwner::current().clone(),
            lease: DEFAULT_LEASE,
            mark_busy: None,
        }
    }
}

/// Default lease length; owners renew it at a third of that.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The result of [`SqliteStore::admit_run`].
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// The run is `running` under the caller's lease.
    Started(RunRecord),
    /// The run is `pending` behind live runs; start it with [`SqliteStore::try_start_run`].
    Queued(RunRecord),
    /// `reject`: a live run holds the thread; nothing was written for the new run.
    Rejected { active: RunRecord },
}

/// What admission did.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmitOutcome {
    pub admission: Admission,
    /// Live runs this admission stopped (`interrupt`: `interrupted`; `rollback`: `error`), as
    /// they were before (their metadata may carry a rollback point).
    pub displaced: Vec<RunRecord>,
    /// Orphans found on the thread and marked `error` (journaled).
    pub reclaimed: Vec<RunRecord>,
}

/// A lease renewal's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Heartbeat {
    /// Still ours; renewed.
    Held,
    /// No longer ours (another process interrupted or reclaimed it, or it ended): stop the run.
    /// Carries the row as it is now (`None` if it vanished).
    Lost(Option<Box<RunRecord>>),
}

/// The terminal write of [`SqliteStore::finish_run_and_thread`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFinish {
    pub error: Option<String>,
    pub stop_reason: Option<String>,
    /// Replaces the stored totals when set.
    pub usage: Option<RunUsage>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
}

/// Whether an active run has nobody driving it any more. Runs created without a lease (an
/// older antler, or a writer that does not use admission) count only when `unleased` is set,
/// and then once idle longer than a lease.
fn is_orphan(run: &RunRecord, now_ms: i64, grace: Duration, unleased: bool) -> bool {
    match (&run.lease_owner, run.lease_expires_at) {
        (Some(owner), Some(until)) => until < now_ms || !LeaseOwner::from_id(owner).is_alive(),
        (Some(owner), None) => !LeaseOwner::from_id(owner).is_alive(),
        (None, _) => {
            unleased
                && chrono::DateTime::parse_from_rfc3339(&run.updated_at)
                    .map(|t| now_ms - t.timestamp_millis() > lease_ms(grace))
                    .unwrap_or(true)
        }
    }
}

/// The terminal write of a run this owner holds the lease of (`None`: it did not; nothing
/// written).
fn finish_run_tx(
    cx: &Cx<'_>,
    id: &str,
    owner: &str,
    status: RunStatus,
    finish: RunFinish,
) -> Result<Option<RunRecord>, StoreError> {
    let ts = now();
    let n = cx.exec(
        "UPDATE runs SET status = ?3, error = ?4,
           stop_reason = COALESCE(?5, stop_reason), updated_at = ?6,
           ended_at = ?6, lease_expires_at = NULL
         WHERE run_id = ?1 AND lease_owner = ?2
           AND status IN ('pending', 'running')",
        params![
            id,
            owner,
            status.as_str(),
            finish.error,
            finish.stop_reason,
            ts
        ],
        "finish a run",
    )?;
    if n == 0 {
        return Ok(None);
    }
    if let Some(u) = finish.usage {
        set_usage_tx(cx, id, u, None, "finish a run")?;
    }
    get_tx(cx, id)
}

fn active_runs_tx(cx: &Cx<'_>, thread: &str) -> Result<Vec<RunRecord>, StoreError> {
    query_runs(
        cx,
        &format!(
            "{COLUMNS} WHERE thread_id = ?1 AND status IN ('pending', 'running')
             ORDER BY created_at, rowid"
        ),
        [thread],
        "read active runs",
    )
}

/// Move an active run to a terminal status (no lease check).
fn end_tx(
    cx: &Cx<'_>,
    run_id: &str,
    status: RunStatus,
    error: Option<&str>,
) -> Result<RunRecord, StoreError> {
    let ts = now();
    update_one(
        cx,
        run_id,
        "UPDATE runs SET status = ?2, error = ?3, updated_at = ?4, ended_at = ?4,
           lease_expires_at = NULL
         WHERE run_id = ?1",
        params![run_id, status.as_str(), error, ts],
    )
}

/// Mark an orphan `error` and journal it: `run.error`, `run.end`, and a zero-delivery receipt
/// unless the run already has one.
fn reclaim_tx(cx: &Cx<'_>, run: &RunRecord, max_trace: usize) -> Result<RunRecord, StoreError> {
    let ended = end_tx(cx, &run.run_id, RunStatus::Error, Some(ORPHANED))?;
    let mut meta = Map::new();
    meta.insert("error_type".into(), Value::from("orphaned"));
    meta.insert("previous_status".into(), Value::from(run.status.as_str()));
    meta.insert(
        "lease_owner".into(),
        run.lease_owner.clone().map_or(Value::Null, Value::from),
    );
    let mut events = vec![
        NewRunEvent::new(
            &run.thread_id,
            &run.run_id,
            "run.error",
            "error",
            Value::from(ORPHANED),
        )
        .with_metadata(meta),
        NewRunEvent::new(
            &run.thread_id,
            &run.run_id,
            "run.end",
            "outputs",
            serde_json::json!({"status": "error", "error": ORPHANED}),
        ),
    ];
    if !has_event_tx(cx, &run.run_id, "run.delivery")? {
        events.push(NewRunEvent::new(
            &run.thread_id,
            &run.run_id,
            "run.delivery",
            "outputs",
            serde_json::json!({"presented": false, "paths": [], "by_tool": {}}),
        ));
    }
    append_tx(cx, events, max_trace)?;
    tracing::warn!(run = %run.run_id, thread = %run.thread_id, "reclaimed an orphaned run");
    Ok(ended)
}

/// Reclaim the orphans among a thread's active runs; returns (live, reclaimed).
fn sweep_tx(
    cx: &Cx<'_>,
    thread: &str,
    grace: Duration,
    max_trace: usize,
    unleased: bool,
) -> Result<(Vec<RunRecord>, Vec<RunRecord>), StoreError> {
    let now = now_ms();
    let mut live = Vec::new();
    let mut reclaimed = Vec::new();
    for run in active_runs_tx(cx, thread)? {
        if is_orphan(&run, now, grace, unleased) {
            reclaimed.push(reclaim_tx(cx, &run, max_trace)?);
        } else {
            live.push(run);
        }
    }
    Ok((live, reclaimed))
}

impl SqliteStore {
    /// Admit a run on its thread atomically (see the module doc). `record.status` and the lease
    /// fields are set here; `record.multitask_strategy` is set to the strategy used.
    pub async fn admit_run(
        &self,
        record: RunRecord,
        opts: AdmitOptions,
    ) -> Result<AdmitOutcome, StoreError> {
        let max_trace = self.max_trace_bytes();
        let mut record = record;
        record.multitask_strategy = opts.strategy.as_str().to_owned();
        record.lease_owner = Some(opts.owner.id().to_owned());
        let mut encoded = EncodedRun::new(record)?;
        self.db()
            .write(move |cx| {
                let thread = encoded.record.thread_id.clone();
                let (live, reclaimed) = sweep_tx(cx, &thread, opts.lease, max_trace, true)?;
                let ts = now();
                let until = now_ms().saturating_add(lease_ms(opts.lease));
                encoded.record.lease_expires_at = Some(until);
                encoded.record.updated_at = ts.clone();
                let mut displaced = Vec::new();
                let mark = |cx: &Cx<'_>| match &opts.mark_busy {
                    Some(m) => mark_busy_tx(cx, &thread, m.owner.as_deref()),
                    None => Ok(()),
                };
                let admission = if live.is_empty() {
                    encoded.record.status = RunStatus::Running;
                    encoded.record.started_at = Some(ts);
                    let started = insert_tx(cx, encoded)?;
                    mark(cx)?;
                    Admission::Started(started)
                } else {
                    match opts.strategy {
                        MultitaskStrategy::Reject => Admission::Rejected {
                            active: live
                                .into_iter()
                                .next()
                                .ok_or_else(|| StoreError::encode("admission", "no active run"))?,
                        },
                        MultitaskStrategy::Enqueue => {
                            encoded.record.status = RunStatus::Pending;
                            Admission::Queued(insert_tx(cx, encoded)?)
                        }
                        MultitaskStrategy::Interrupt | MultitaskStrategy::Rollback => {
                            // The new run is persisted first, in the same transaction: the old
                            // one is never stopped for a run that was not recorded.
                            encoded.record.status = RunStatus::Running;
                            encoded.record.started_at = Some(ts);
                            let started = insert_tx(cx, encoded)?;
                            let (status, error) = match opts.strategy {
                                MultitaskStrategy::Rollback => {
                                    (RunStatus::Error, Some(ROLLED_BACK))
                                }
                                _ => (RunStatus::Interrupted, None),
                            };
                            for run in live {
                                end_tx(cx, &run.run_id, status, error)?;
                                displaced.push(run);
                            }
                            mark(cx)?;
                            Admission::Started(started)
                        }
                    }
                };
                Ok(AdmitOutcome {
                    admission,
                    displaced,
                    reclaimed,
                })
            })
            .await
    }

    /// Start a queued (`pending`) run of `owner` once no earlier live run holds its thread.
    /// Returns the running record, or `None` while it must keep waiting. Fails with `NotFound`
    /// when the run is no longer pending under this owner (it was interrupted or reclaimed).
    /// `mark_busy`: mark the thread busy in the same commit when the run starts.
    pub async fn try_start_run(
        &self,
        run_id: &str,
        owner: &LeaseOwner,
        lease: Duration,
        mark_busy: Option<BusyMark>,
    ) -> Result<Option<RunRecord>, StoreError> {
        let id = run_id.to_owned();
        let owner = owner.id().to_owned();
        let max_trace = self.max_trace_bytes();
        self.db()
            .write(move |cx| {
                let run = get_tx(cx, &id)?
                    .filter(|r| {
                        r.status == RunStatus::Pending && r.lease_owner.as_deref() == Some(&owner)
                    })
                    .ok_or_else(|| StoreError::NotFound {
                        kind: "pending run",
                        id: id.clone(),
                    })?;
                let (live, _) = sweep_tx(cx, &run.thread_id, lease, max_trace, true)?;
                // FIFO: any other running run, or a pending one queued before this one.
                let mine = live.iter().position(|r| r.run_id == id);
                let ahead = live.iter().enumerate().any(|(i, r)| {
                    r.run_id != id
                        && (r.status == RunStatus::Running || mine.is_some_and(|m| i < m))
                });
                if ahead {
                    return Ok(None);
                }
                let until = now_ms().saturating_add(lease_ms(lease));
                let ts = now();
                let started = update_one(
                    cx,
                    &id,
                    "UPDATE runs SET status = 'running', started_at = ?2, updated_at = ?2,
                       lease_expires_at = ?3
                     WHERE run_id = ?1",
                    params![id, ts, until],
                )?;
                if let Some(m) = &mark_busy {
                    mark_busy_tx(cx, &started.thread_id, m.owner.as_deref())?;
                }
                Ok(Some(started))
            })
            .await
    }

    /// Renew the lease of an active run held by `owner`.
    pub async fn heartbeat_run(
        &self,
        run_id: &str,
        owner: &LeaseOwner,
        lease: Duration,
    ) -> Result<Heartbeat, StoreError> {
        let id = run_id.to_owned();
        let owner = owner.id().to_owned();
        self.db()
            .write(move |cx| {
                let until = now_ms().saturating_add(lease_ms(lease));
                let n = cx.exec(
                    "UPDATE runs SET lease_expires_at = ?3
                     WHERE run_id = ?1 AND lease_owner = ?2
                       AND status IN ('pending', 'running')",
                    params![id, owner, until],
                    "renew a run lease",
                )?;
                if n == 1 {
                    Ok(Heartbeat::Held)
                } else {
                    Ok(Heartbeat::Lost(get_tx(cx, &id)?.map(Box::new)))
                }
            })
            .await
    }

    /// Record a run's terminal status, only while `owner` still holds it, and then the thread's
    /// record, in the same transaction: `busy` while another live run holds the thread, else
    /// `thread_status`; the title set when `title` is `Some` (a missing thread record is left
    /// missing). Returns the updated run, or `None` when it was no longer held (interrupted or
    /// reclaimed by another process) — then nothing was written.
    pub async fn finish_run_and_thread(
        &self,
        run_id: &str,
        owner: &LeaseOwner,
        status: RunStatus,
        finish: RunFinish,
        thread_status: &str,
        title: Option<String>,
    ) -> Result<Option<RunRecord>, StoreError> {
        let id = run_id.to_owned();
        let owner = owner.id().to_owned();
        let thread_status = thread_status.to_owned();
        self.db()
            .write(move |cx| {
                let Some(run) = finish_run_tx(cx, &id, &owner, status, finish)? else {
                    return Ok(None);
                };
                let ts = now();
                // A run queued or admitted meanwhile keeps the thread busy (this one is no
                // longer live: only existence matters, not the records).
                let others = cx
                    .query_opt(
                        "SELECT 1 FROM runs
                         WHERE thread_id = ?1 AND status IN ('pending', 'running') LIMIT 1",
                        [&run.thread_id],
                        "read active runs",
                        |_| Ok(()),
                    )?
                    .is_some();
                let thread_status = if others {
                    crate::ThreadRecord::BUSY
                } else {
                    thread_status.as_str()
                };
                cx.exec(
                    "UPDATE threads SET status = ?2, title = COALESCE(?3, title), updated_at = ?4
                     WHERE thread_id = ?1",
                    params![run.thread_id, thread_status, title, ts],
                    "update a thread",
                )?;
                Ok(Some(run))
            })
            .await
    }

    /// Startup recovery without trampling live runs: every `pending`/`running` run whose lease
    /// expired or whose owner process is gone is marked `error` and journaled (`run.error`,
    /// `run.end`, a zero-delivery `run.delivery`). Runs driven by live processes — other
    /// `antler run`s on other threads — are left alone, and so are runs created without a lease
    /// (nothing tells whether their writer is alive; admission on their thread reclaims them
    /// once idle longer than `grace`).
    pub async fn reclaim_orphaned_runs(
        &self,
        grace: Duration,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let max_trace = self.max_trace_bytes();
        self.db()
            .write(move |cx| {
                let threads: Vec<String> = cx.query_all(
                    "SELECT DISTINCT thread_id FROM runs WHERE status IN ('pending', 'running')",
                    [],
                    "read active runs",
                    |r| r.get(0),
                )?;
                let mut out = Vec::new();
                for t in threads {
                    out.extend(sweep_tx(cx, &t, grace, max_trace, false)?.1);
                }
                Ok(out)
            })
            .await
    }

    /// The `pending`/`running` runs of a thread, oldest first.
    pub async fn active_runs(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let thread = thread_id.to_owned();
        self.db().read(move |cx| active_runs_tx(cx, &thread)).await
    }
}
