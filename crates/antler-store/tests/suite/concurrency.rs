//! Many threads writing at once; writes never wait for readers.

use std::time::Duration;

use antler_protocol::checkpoint::Checkpointer;
use antler_protocol::{StateUpdate, ThreadState};

use super::{db_file, msg, one_checkpoint, temp_store, ThreadWriter};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_threads_all_persist() {
    let (_dir, store) = temp_store();
    const THREADS: usize = 64;
    const STEPS: usize = 25;
    let mut tasks = Vec::new();
    for t in 0..THREADS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let thread = format!("thread-{t}");
            let mut w = ThreadWriter::new(&thread);
            let mut state = ThreadState::default();
            for s in 0..STEPS {
                state
                    .apply(StateUpdate::message(msg(
                        &format!("m{s}"),
                        &format!("{t}/{s}"),
                    )))
                    .unwrap();
                w.commit(&store, &mut state).await;
                // Readers interleave with the writers.
                if s % 5 == 0 {
                    let head = store.latest(&thread).await.unwrap().unwrap();
                    assert_eq!(head.state.messages.len(), s + 1);
                }
            }
            (thread, state)
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    for (thread, state) in done {
        let head = store.latest(&thread).await.unwrap().unwrap();
        assert_eq!(head.state, state, "{thread}");
        assert_eq!(store.list(&thread, 100, None).await.unwrap().len(), STEPS);
    }
    assert_eq!(store.stats().checkpoints, (THREADS * STEPS) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_does_not_wait_for_an_open_reader() {
    let (dir, store) = temp_store();
    let (mut w, mut state) = one_checkpoint(&store).await;

    // Another connection holds a read transaction open (a slow reader).
    let mut reader = rusqlite::Connection::open(db_file(&dir)).unwrap();
    let tx = reader.transaction().unwrap();
    let n: i64 = tx
        .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);

    state.apply(StateUpdate::message(msg("b", "b"))).unwrap();
    let write = w.write_for(&mut state);
    tokio::time::timeout(Duration::from_secs(2), store.put(write))
        .await
        .expect("a write blocked on a reader")
        .unwrap();
    // The reader still sees its snapshot.
    let n: i64 = tx
        .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    drop(tx);
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
}

/// A checkpoint write runs on the caller's thread only when it can take the write lock at
/// once: while another connection (another process) holds it, the write waits on the writer
/// thread and this thread stays free — here, free to release that lock.
#[tokio::test(flavor = "current_thread")]
async fn a_write_behind_another_process_lock_does_not_block_the_caller() {
    let (dir, store) = temp_store();
    let (mut w, mut state) = one_checkpoint(&store).await;

    let mut other = rusqlite::Connection::open(db_file(&dir)).unwrap();
    let tx = other
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    state.apply(StateUpdate::message(msg("b", "b"))).unwrap();
    let write = w.write_for(&mut state);
    let put = {
        let store = store.clone();
        tokio::spawn(async move { store.put(write).await })
    };
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    // Had the put blocked this (only) thread on the lock, we would not get here before it
    // timed out with an error.
    assert!(!put.is_finished(), "the put cannot have committed yet");
    tx.commit().unwrap();
    put.await.unwrap().unwrap();
    assert_eq!(store.latest("t").await.unwrap().unwrap().state, state);
}
