//! Thread index and run records.

use antler_protocol::checkpoint::Checkpointer;
use antler_protocol::{StateUpdate, ThreadState};
use antler_store::{
    RunRecord, RunStatus, RunUsage, SqliteStore, StoreError, ThreadQuery, ThreadRecord,
    ThreadUpdate,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::{latest_message_count, msg, temp_store, ThreadWriter};

fn ids(threads: &[ThreadRecord]) -> Vec<&str> {
    threads.iter().map(|t| t.thread_id.as_str()).collect()
}

#[tokio::test]
async fn thread_crud() {
    let (_dir, store) = temp_store();
    let mut a = ThreadRecord::new("a");
    a.owner = Some("alice".into());
    a.metadata = json!({"graph_id": "lead_agent"});
    let a = store.upsert_thread(a).await.unwrap();
    assert_eq!(store.get_thread("a").await.unwrap(), Some(a.clone()));
    assert!(chrono::DateTime::parse_from_rfc3339(&a.created_at).is_ok());
    assert!(a.created_at.ends_with('Z'));

    let mut b = ThreadRecord::new("b");
    b.owner = Some("bob".into());
    store.upsert_thread(b).await.unwrap();
    let mut c = ThreadRecord::new("c");
    c.owner = Some("alice".into());
    c.status = ThreadRecord::BUSY.into();
    store.upsert_thread(c).await.unwrap();

    let all = store.list_threads(ThreadQuery::default()).await.unwrap();
    assert_eq!(ids(&all), ["c", "b", "a"]);

    // Updating `a` moves it to the front.
    let updated = store
        .update_thread(
            "a",
            ThreadUpdate {
                title: Some(Some("Plan a trip".into())),
                status: Some(ThreadRecord::INTERRUPTED.into()),
                metadata: Some(json!({"run_count": 2}).as_object().unwrap().clone()),
            },
        )
        .await
        .unwrap();
    assert_eq!(updated.title.as_deref(), Some("Plan a trip"));
    assert_eq!(
        updated.metadata,
        json!({"graph_id": "lead_agent", "run_count": 2})
    );
    assert!(updated.updated_at > a.updated_at);
    assert_eq!(updated.created_at, a.created_at);
    assert_eq!(store.get_thread("a").await.unwrap(), Some(updated.clone()));

    let all = store.list_threads(ThreadQuery::default()).await.unwrap();
    assert_eq!(ids(&all), ["a", "c", "b"]);
    let q = |owner: Option<&str>, status: Option<&str>, limit, offset| ThreadQuery {
        limit,
        offset,
        owner: owner.map(str::to_owned),
        status: status.map(str::to_owned),
    };
    assert_eq!(
        ids(&store
            .list_threads(q(Some("alice"), None, 10, 0))
            .await
            .unwrap()),
        ["a", "c"]
    );
    assert_eq!(
        ids(&store
            .list_threads(q(None, Some("busy"), 10, 0))
            .await
            .unwrap()),
        ["c"]
    );
    assert_eq!(
        ids(&store.list_threads(q(None, None, 1, 1)).await.unwrap()),
        ["c"]
    );

    // Upsert keeps created_at and replaces the rest.
    let mut again = ThreadRecord::new("a");
    again.created_at = "2030-01-01T00:00:00Z".into();
    let again = store.upsert_thread(again).await.unwrap();
    assert_eq!(again.created_at, a.created_at);
    assert_eq!(again.title, None);
    assert_eq!(again.status, "idle");

    let err = store
        .update_thread("missing", ThreadUpdate::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound { kind: "thread", .. }),
        "{err}"
    );
    assert_eq!(store.get_thread("missing").await.unwrap(), None);
}

#[tokio::test]
async fn delete_thread_removes_checkpoints_and_runs() {
    let (_dir, store) = temp_store();
    store.upsert_thread(ThreadRecord::new("t")).await.unwrap();
    store
        .upsert_thread(ThreadRecord::new("keep"))
        .await
        .unwrap();
    for thread in ["t", "keep"] {
        let mut w = ThreadWriter::new(thread);
        let mut state = ThreadState::default();
        for i in 0..3 {
            state
                .apply(StateUpdate::message(msg(&format!("m{i}"), "x")))
                .unwrap();
            w.commit(&store, &mut state).await;
        }
        store
            .create_run(RunRecord::new(
                format!("run-{thread}"),
                thread,
                "lead_agent",
            ))
            .await
            .unwrap();
    }
    assert!(store.delete_thread("t").await.unwrap());
    assert_eq!(store.get_thread("t").await.unwrap(), None);
    assert!(store.latest("t").await.unwrap().is_none());
    assert!(store.list_runs("t", 10).await.unwrap().is_empty());
    assert!(store.get_run("run-t").await.unwrap().is_none());
    assert!(!store.delete_thread("t").await.unwrap());

    assert!(store.get_thread("keep").await.unwrap().is_some());
    assert_eq!(latest_message_count(&store, "keep").await, 3);
    assert_eq!(store.list_runs("keep", 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn run_lifecycle() {
    let (_dir, store) = temp_store();
    let mut run = RunRecord::new("r1", "t", "lead_agent");
    run.kwargs = json!({"input": {"messages": []}});
    run.multitask_strategy = "interrupt".into();
    let created = store.create_run(run.clone()).await.unwrap();
    assert_eq!(created, run);
    assert_eq!(store.get_run("r1").await.unwrap(), Some(run.clone()));
    let dup = store.create_run(run.clone()).await.unwrap_err();
    assert_eq!(
        dup.failure(),
        Some(antler_store::Failure::Constraint),
        "{dup}"
    );

    let running = store
        .set_run_status("r1", RunStatus::Running, None)
        .await
        .unwrap();
    assert_eq!(running.status, RunStatus::Running);
    assert!(running.updated_at >= run.updated_at);

    let used = store
        .update_run_usage(
            "r1",
            RunUsage {
                total_input_tokens: 120,
                total_output_tokens: 30,
                total_tokens: 150,
                llm_call_count: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (used.total_input_tokens, used.total_output_tokens),
        (120, 30)
    );
    assert_eq!((used.total_tokens, used.llm_call_count), (150, 2));

    let stopped = store
        .set_run_stop_reason("r1", Some("loop_capped".into()))
        .await
        .unwrap();
    assert_eq!(stopped.stop_reason.as_deref(), Some("loop_capped"));
    let failed = store
        .set_run_status("r1", RunStatus::Error, Some("model call failed".into()))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Error);
    assert_eq!(failed.error.as_deref(), Some("model call failed"));
    assert_eq!(failed.total_tokens, 150);
    assert_eq!(store.get_run("r1").await.unwrap(), Some(failed));

    let err = store
        .set_run_status("nope", RunStatus::Success, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NotFound { kind: "run", .. }),
        "{err}"
    );

    // Newest first.
    store
        .create_run(RunRecord::new("r2", "t", "lead_agent"))
        .await
        .unwrap();
    store
        .create_run(RunRecord::new("r3", "t", "lead_agent"))
        .await
        .unwrap();
    store
        .create_run(RunRecord::new("other", "u", "lead_agent"))
        .await
        .unwrap();
    let listed: Vec<String> = store
        .list_runs("t", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(listed, ["r3", "r2", "r1"]);
    assert_eq!(store.list_runs("t", 2).await.unwrap().len(), 2);
}

#[tokio::test]
async fn mark_unfinished_runs_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("antler.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        for (id, status) in [
            ("pending", RunStatus::Pending),
            ("running", RunStatus::Running),
            ("done", RunStatus::Success),
            ("failed", RunStatus::Error),
        ] {
            let mut r = RunRecord::new(id, "t", "lead_agent");
            r.status = status;
            store.create_run(r).await.unwrap();
        }
    }
    // A new process starts and recovers.
    let store = SqliteStore::open(&path).unwrap();
    let n = store
        .mark_unfinished_runs(RunStatus::Error, Some("server_restarted"))
        .await
        .unwrap();
    assert_eq!(n, 2);
    for (id, status, reason) in [
        ("pending", RunStatus::Error, Some("server_restarted")),
        ("running", RunStatus::Error, Some("server_restarted")),
        ("done", RunStatus::Success, None),
        ("failed", RunStatus::Error, None),
    ] {
        let r = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(
            (r.status, r.stop_reason.as_deref()),
            (status, reason),
            "{id}"
        );
    }
    assert_eq!(
        store
            .mark_unfinished_runs(RunStatus::Interrupted, None)
            .await
            .unwrap(),
        0
    );
}

#[test]
fn run_status_strings() {
    for s in RunStatus::ALL {
        assert_eq!(s.as_str().parse::<RunStatus>(), Ok(s));
        assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
    }
    assert!("cancelled".parse::<RunStatus>().is_err());
    assert_eq!(
        RunStatus::from(antler_protocol::checkpoint::RunStatus::Interrupted),
        RunStatus::Interrupted
    );
    assert!(RunStatus::Timeout.is_terminal() && !RunStatus::Running.is_terminal());
}

#[tokio::test]
async fn marking_a_thread_busy_creates_it_or_touches_only_its_status_and_missing_owner() {
    let (_dir, store) = temp_store();
    // New: created busy, owned by the caller, with a new record's fields.
    store.mark_thread_busy("n", Some("alice")).await.unwrap();
    let n = store.get_thread("n").await.unwrap().unwrap();
    assert_eq!(
        (n.status.as_str(), n.owner.as_deref(), &n.metadata, &n.title),
        (ThreadRecord::BUSY, Some("alice"), &json!({}), &None)
    );
    assert!(chrono::DateTime::parse_from_rfc3339(&n.created_at).is_ok());

    // Existing: title, metadata, owner and created_at stay; status and updated_at change.
    let mut t = ThreadRecord::new("t");
    t.owner = Some("bob".into());
    t.title = Some("Plan".into());
    t.metadata = json!({"graph_id": "lead_agent"});
    t.created_at = "2020-01-01T00:00:00.000000Z".into();
    t.updated_at = t.created_at.clone();
    let t = store.upsert_thread(t).await.unwrap();
    store.mark_thread_busy("t", Some("alice")).await.unwrap();
    let busy = store.get_thread("t").await.unwrap().unwrap();
    assert_eq!(busy.status, ThreadRecord::BUSY);
    assert_eq!(
        (&busy.owner, &busy.title, &busy.metadata, &busy.created_at),
        (&t.owner, &t.title, &t.metadata, &t.created_at)
    );
    assert!(busy.updated_at >= t.updated_at);

    // An ownerless thread takes the caller as owner.
    store.upsert_thread(ThreadRecord::new("o")).await.unwrap();
    store.mark_thread_busy("o", Some("carol")).await.unwrap();
    let o = store.get_thread("o").await.unwrap().unwrap();
    assert_eq!(o.owner.as_deref(), Some("carol"));
}
