//! Run admission, leases and orphan reclamation (spec 40 §6.4, `test_run_manager.py`).

use std::time::Duration;

use antler_store::runs::{ORPHANED, ROLLED_BACK};
use antler_store::{
    Admission, AdmitOptions, AdmitOutcome, BusyMark, EventQuery, Heartbeat, LeaseOwner,
    MultitaskStrategy, RunFinish, RunRecord, RunStatus, SqliteStore, StoreError, ThreadRecord,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::temp_store;

fn opts(strategy: MultitaskStrategy) -> AdmitOptions {
    AdmitOptions::new(strategy)
}

/// Admit a new run `id` (assistant `a`) on `thread` with `strategy` and the default options;
/// the admission itself must not fail.
async fn admit(
    store: &SqliteStore,
    id: &str,
    thread: &str,
    strategy: MultitaskStrategy,
) -> AdmitOutcome {
    store
        .admit_run(RunRecord::new(id, thread, "a"), opts(strategy))
        .await
        .unwrap()
}

/// Admit `r1` on thread `t`, then `r2` there with `strategy`.
async fn second_run(store: &SqliteStore, strategy: MultitaskStrategy) -> AdmitOutcome {
    admit(store, "r1", "t", MultitaskStrategy::Reject).await;
    admit(store, "r2", "t", strategy).await
}

fn started(a: Admission) -> RunRecord {
    match a {
        Admission::Started(r) => r,
        other => panic!("expected Started, got {other:?}"),
    }
}

/// The lease owner id of a process that has exited (same host).
fn dead_owner() -> LeaseOwner {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let me = LeaseOwner::current().id().to_owned();
    let host = me.split('/').next().unwrap();
    LeaseOwner::from_id(format!("{host}/{pid}/1"))
}

/// Ends `run` as a success that leaves its thread idle (no title), as `owner`.
async fn finish_idle(store: &SqliteStore, run: &str, owner: &LeaseOwner) -> Option<RunRecord> {
    store
        .finish_run_and_thread(
            run,
            owner,
            RunStatus::Success,
            RunFinish::default(),
            ThreadRecord::IDLE,
            None,
        )
        .await
        .unwrap()
}

fn far_future() -> i64 {
    i64::MAX / 2
}

#[tokio::test]
async fn a_free_thread_starts_the_run_under_a_lease() {
    let (_d, store) = temp_store();
    let out = store
        .admit_run(
            RunRecord::new("r1", "t", "lead_agent"),
            opts(MultitaskStrategy::Reject),
        )
        .await
        .unwrap();
    assert!(out.displaced.is_empty() && out.reclaimed.is_empty());
    let run = started(out.admission);
    assert_eq!(run.status, RunStatus::Running);
    assert!(run.started_at.is_some());
    assert_eq!(run.lease_owner.as_deref(), Some(LeaseOwner::current().id()));
    assert!(run.lease_expires_at.is_some());
    assert_eq!(store.get_run("r1").await.unwrap(), Some(run));
}

#[tokio::test]
async fn reject_refuses_a_second_run_and_writes_nothing() {
    let (_d, store) = temp_store();
    let out = second_run(&store, MultitaskStrategy::Reject).await;
    match out.admission {
        Admission::Rejected { active } => assert_eq!(active.run_id, "r1"),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.get_run("r2").await.unwrap(), None);
    // Another thread is unaffected.
    let other = admit(&store, "r3", "u", MultitaskStrategy::Reject).await;
    started(other.admission);
}

#[tokio::test]
async fn interrupt_stops_the_old_run_and_starts_the_new_one_atomically() {
    let (_d, store) = temp_store();
    let out = second_run(&store, MultitaskStrategy::Interrupt).await;
    let new = started(out.admission);
    assert_eq!(new.multitask_strategy, "interrupt");
    assert_eq!(out.displaced.len(), 1);
    let old = store.get_run("r1").await.unwrap().unwrap();
    assert_eq!(old.status, RunStatus::Interrupted);
    assert!(old.ended_at.is_some());
    assert_eq!(old.error, None);
    // The old owner learns it at its next heartbeat and must not finalize.
    let hb = store
        .heartbeat_run("r1", LeaseOwner::current(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(hb, Heartbeat::Lost(Some(ref r)) if r.status == RunStatus::Interrupted));
    let fin = finish_idle(&store, "r1", LeaseOwner::current()).await;
    assert_eq!(fin, None);
    assert_eq!(
        store.get_run("r1").await.unwrap().unwrap().status,
        RunStatus::Interrupted
    );
    assert_eq!(store.active_runs("t").await.unwrap().len(), 1);
}

#[tokio::test]
async fn rollback_marks_the_old_run_error() {
    let (_d, store) = temp_store();
    let mut first = RunRecord::new("r1", "t", "a");
    first.metadata = json!({"rollback_checkpoint_id": "cp-7"});
    store
        .admit_run(first, opts(MultitaskStrategy::Reject))
        .await
        .unwrap();
    let out = admit(&store, "r2", "t", MultitaskStrategy::Rollback).await;
    started(out.admission);
    // The caller finds the rollback point on the displaced run.
    assert_eq!(
        out.displaced[0].metadata["rollback_checkpoint_id"],
        json!("cp-7")
    );
    let old = store.get_run("r1").await.unwrap().unwrap();
    assert_eq!(
        (old.status, old.error.as_deref()),
        (RunStatus::Error, Some(ROLLED_BACK))
    );
}

#[tokio::test]
async fn enqueue_waits_its_turn_in_order() {
    let (_d, store) = temp_store();
    let owner = LeaseOwner::current();
    let lease = Duration::from_secs(30);
    admit(&store, "r1", "t", MultitaskStrategy::Reject).await;
    for id in ["r2", "r3"] {
        let out = store
            .admit_run(
                RunRecord::new(id, "t", "a"),
                opts(MultitaskStrategy::Enqueue),
            )
            .await
            .unwrap();
        assert!(
            matches!(out.admission, Admission::Queued(ref r) if r.status == RunStatus::Pending)
        );
    }
    assert_eq!(
        store.try_start_run("r2", owner, lease, None).await.unwrap(),
        None
    );
    finish_idle(&store, "r1", owner).await.unwrap();
    // r3 queued after r2: still waits.
    assert_eq!(
        store.try_start_run("r3", owner, lease, None).await.unwrap(),
        None
    );
    let r2 = store
        .try_start_run("r2", owner, lease, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r2.status, RunStatus::Running);
    assert_eq!(
        store.try_start_run("r3", owner, lease, None).await.unwrap(),
        None
    );
    // A run that is not pending any more cannot be started.
    let err = store
        .try_start_run("r1", owner, lease, None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
}

#[tokio::test]
async fn a_dead_owner_is_reclaimed_at_admission_and_journaled() {
    let (_d, store) = temp_store();
    let mut orphan = RunRecord::new("crashed", "t", "a");
    orphan.status = RunStatus::Running;
    orphan.lease_owner = Some(dead_owner().id().to_owned());
    orphan.lease_expires_at = Some(far_future());
    store.create_run(orphan).await.unwrap();
    assert!(!dead_owner().is_alive());

    let out = admit(&store, "next", "t", MultitaskStrategy::Reject).await;
    started(out.admission);
    assert_eq!(out.reclaimed.len(), 1);
    let old = store.get_run("crashed").await.unwrap().unwrap();
    assert_eq!(
        (old.status, old.error.as_deref()),
        (RunStatus::Error, Some(ORPHANED))
    );
    let events = store
        .list_run_events("crashed", EventQuery::default())
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, ["run.error", "run.end", "run.delivery"]);
    assert_eq!(events[0].metadata["error_type"], json!("orphaned"));
    assert_eq!(events[0].metadata["previous_status"], json!("running"));
    assert_eq!(events[1].content["status"], json!("error"));
    assert_eq!(
        events[2].content,
        json!({"presented": false, "paths": [], "by_tool": {}})
    );
}

#[tokio::test]
async fn reclaim_marks_only_runs_nobody_drives() {
    let (_d, store) = temp_store();
    let mk = |id: &str, thread: &str, owner: Option<String>, until: Option<i64>| {
        let mut r = RunRecord::new(id, thread, "a");
        r.status = RunStatus::Running;
        r.lease_owner = owner;
        r.lease_expires_at = until;
        r
    };
    let me = LeaseOwner::current().id().to_owned();
    let runs = [
        // A live process on another thread (e.g. a concurrent `antler run`).
        mk("live", "t1", Some(me.clone()), Some(far_future())),
        // Its process is alive but stopped renewing the lease.
        mk("expired", "t2", Some(me.clone()), Some(1)),
        mk(
            "dead",
            "t3",
            Some(dead_owner().id().to_owned()),
            Some(far_future()),
        ),
        // Another machine: only the lease can tell, and it still holds.
        mk(
            "remote",
            "t4",
            Some("elsewhere@abc/1/1".into()),
            Some(far_future()),
        ),
    ];
    for r in runs {
        store.create_run(r).await.unwrap();
    }
    // A lease-less run from an older antler, idle for long.
    let mut legacy = mk("legacy", "t5", None, None);
    legacy.updated_at = "2020-01-01T00:00:00.000000Z".into();
    store.create_run(legacy).await.unwrap();
    // …and one that was just touched.
    store
        .create_run(mk("fresh-legacy", "t6", None, None))
        .await
        .unwrap();

    let mut reclaimed: Vec<String> = store
        .reclaim_orphaned_runs(Duration::from_secs(30))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    reclaimed.sort();
    assert_eq!(reclaimed, ["dead", "expired"]);
    for id in ["live", "remote", "legacy", "fresh-legacy"] {
        assert_eq!(
            store.get_run(id).await.unwrap().unwrap().status,
            RunStatus::Running,
            "{id}"
        );
    }
    // Idempotent.
    assert!(store
        .reclaim_orphaned_runs(Duration::from_secs(30))
        .await
        .unwrap()
        .is_empty());
    // A lease-less run idle for long is reclaimed by admission on its own thread; a fresh one
    // still holds its thread.
    let out = admit(&store, "after-legacy", "t5", MultitaskStrategy::Reject).await;
    assert_eq!(out.reclaimed.len(), 1);
    started(out.admission);
    let out = admit(&store, "blocked", "t6", MultitaskStrategy::Reject).await;
    assert!(matches!(out.admission, Admission::Rejected { .. }));
}

#[tokio::test]
async fn heartbeat_and_finish_belong_to_the_lease_holder() {
    let (_d, store) = temp_store();
    let out = admit(&store, "r1", "t", MultitaskStrategy::Reject).await;
    let before = started(out.admission).lease_expires_at.unwrap();
    let me = LeaseOwner::current();
    assert_eq!(
        store
            .heartbeat_run("r1", me, Duration::from_secs(3600))
            .await
            .unwrap(),
        Heartbeat::Held
    );
    let after = store
        .get_run("r1")
        .await
        .unwrap()
        .unwrap()
        .lease_expires_at
        .unwrap();
    assert!(after > before);
    let stranger = LeaseOwner::from_id("elsewhere@abc/1/1");
    assert!(matches!(
        store
            .heartbeat_run("r1", &stranger, Duration::from_secs(30))
            .await
            .unwrap(),
        Heartbeat::Lost(Some(_))
    ));
    assert_eq!(
        store
            .finish_run_and_thread(
                "r1",
                &stranger,
                RunStatus::Error,
                RunFinish::default(),
                ThreadRecord::ERROR,
                None,
            )
            .await
            .unwrap(),
        None
    );
    let done = store
        .finish_run_and_thread(
            "r1",
            me,
            RunStatus::Interrupted,
            RunFinish {
                error: None,
                stop_reason: Some("user".into()),
                usage: Some(antler_store::RunUsage {
                    total_input_tokens: 3,
                    total_output_tokens: 4,
                    total_tokens: 7,
                    llm_call_count: 1,
                }),
            },
            ThreadRecord::INTERRUPTED,
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status, RunStatus::Interrupted);
    assert_eq!(done.total_tokens, 7);
    assert!(done.ended_at.is_some() && done.lease_expires_at.is_none());
    // Finished: the thread is free again.
    started(
        admit(&store, "r2", "t", MultitaskStrategy::Reject)
            .await
            .admission,
    );
}

#[tokio::test]
async fn status_timestamps_follow_the_lifecycle() {
    let (_d, store) = temp_store();
    store
        .create_run(RunRecord::new("r", "t", "a"))
        .await
        .unwrap();
    let running = store
        .set_run_status("r", RunStatus::Running, None)
        .await
        .unwrap();
    assert!(running.started_at.is_some() && running.ended_at.is_none());
    let done = store
        .set_run_status("r", RunStatus::Success, None)
        .await
        .unwrap();
    assert_eq!(done.started_at, running.started_at);
    assert!(done.ended_at.is_some());
}

#[test]
fn strategy_strings() {
    for s in MultitaskStrategy::ALL {
        assert_eq!(s.as_str().parse::<MultitaskStrategy>().unwrap(), s);
        assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
    }
    assert_eq!(MultitaskStrategy::default(), MultitaskStrategy::Reject);
}

/// A run's end and its thread's status after it are one write; a run still queued on the
/// thread keeps it busy, and a stranger's end writes neither.
#[tokio::test]
async fn a_runs_end_sets_its_threads_status_unless_another_run_holds_the_thread() {
    let (_dir, store) = temp_store();
    let owner = LeaseOwner::current();
    store.mark_thread_busy("t", None).await.unwrap();
    admit(&store, "r1", "t", MultitaskStrategy::Reject).await;
    admit(&store, "r2", "t", MultitaskStrategy::Enqueue).await;
    let end = |run: &'static str,
               by: &LeaseOwner,
               status,
               thread_status: &'static str,
               title: Option<&str>| {
        let (store, by, title) = (store.clone(), by.clone(), title.map(str::to_owned));
        async move {
            store
                .finish_run_and_thread(run, &by, status, RunFinish::default(), thread_status, title)
                .await
                .unwrap()
        }
    };
    let thread = || async {
        let t = store.get_thread("t").await.unwrap().unwrap();
        (t.status, t.title)
    };
    let busy_trip = ("busy".to_owned(), Some("Trip".to_owned()));

    let r1 = end("r1", owner, RunStatus::Success, "idle", Some("Trip")).await;
    assert_eq!(r1.map(|r| r.status), Some(RunStatus::Success));
    assert_eq!(thread().await, busy_trip);

    let stranger = dead_owner();
    let none = end("r2", &stranger, RunStatus::Error, "error", Some("Other")).await;
    assert_eq!(none, None);
    assert_eq!(thread().await, busy_trip);

    let r2 = end("r2", owner, RunStatus::Interrupted, "interrupted", None).await;
    assert_eq!(r2.map(|r| r.status), Some(RunStatus::Interrupted));
    assert_eq!(
        thread().await,
        ("interrupted".to_owned(), Some("Trip".to_owned()))
    );
}

/// Admission asked to mark the thread does it in its own commit for a run it starts (creating
/// the thread with the given owner, or keeping an existing thread's owner), and leaves the thread
/// alone for a run it queues or rejects.
#[tokio::test]
async fn a_started_run_marks_its_thread_busy_in_the_admission() {
    let (_d, store) = temp_store();
    let admit = |id: &'static str, thread: &'static str, strategy, mark: bool| {
        let store = store.clone();
        let mut o = opts(strategy);
        if mark {
            o.mark_busy = Some(BusyMark {
                owner: Some("alice".into()),
            });
        }
        async move {
            store
                .admit_run(RunRecord::new(id, thread, "a"), o)
                .await
                .unwrap()
                .admission
        }
    };
    let status = |thread: &'static str| {
        let store = store.clone();
        async move {
            store
                .get_thread(thread)
                .await
                .unwrap()
                .map(|t| (t.status, t.owner))
        }
    };
    let busy = |owner: &str| Some((ThreadRecord::BUSY.to_owned(), Some(owner.to_owned())));

    // A new thread: created busy, owned by the run's user.
    started(admit("r1", "t", MultitaskStrategy::Reject, true).await);
    assert_eq!(status("t").await, busy("alice"));

    // Queued behind r1 or rejected: the thread record is not touched.
    let mut idle = store.get_thread("t").await.unwrap().unwrap();
    idle.status = ThreadRecord::IDLE.to_owned();
    idle.owner = Some("bob".into());
    store.upsert_thread(idle).await.unwrap();
    let before = store.get_thread("t").await.unwrap();
    let queued = admit("r2", "t", MultitaskStrategy::Enqueue, true).await;
    assert!(matches!(queued, Admission::Queued(_)));
    let rejected = admit("r3", "t", MultitaskStrategy::Reject, true).await;
    assert!(matches!(rejected, Admission::Rejected { .. }));
    assert_eq!(store.get_thread("t").await.unwrap(), before);

    // Interrupting the live runs starts the new one: busy again, the existing owner kept.
    started(admit("r4", "t", MultitaskStrategy::Interrupt, true).await);
    assert_eq!(status("t").await, busy("bob"));

    // Without the option (the default), admission leaves a thread it starts a run on alone.
    started(admit("r5", "u", MultitaskStrategy::Reject, false).await);
    assert_eq!(status("u").await, None);

    // A queued run is marked by the start that takes it out of the queue: r6 waits behind r5
    // (nothing marked), r5 ends, r6 starts and its thread is created busy.
    let queued = admit("r6", "u", MultitaskStrategy::Enqueue, true).await;
    assert!(matches!(queued, Admission::Queued(_)));
    let owner = LeaseOwner::current();
    let lease = Duration::from_secs(30);
    let mark = || {
        Some(BusyMark {
            owner: Some("alice".into()),
        })
    };
    assert_eq!(
        store
            .try_start_run("r6", owner, lease, mark())
            .await
            .unwrap(),
        None
    );
    assert_eq!(status("u").await, None);
    finish_idle(&store, "r5", owner).await.unwrap();
    // The run's end writes a thread record only where one exists.
    assert_eq!(status("u").await, None);
    let r6 = store
        .try_start_run("r6", owner, lease, mark())
        .await
        .unwrap();
    assert_eq!(r6.map(|r| r.status), Some(RunStatus::Running));
    assert_eq!(status("u").await, busy("alice"));
}
