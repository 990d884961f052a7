//! The shared pool on its own (one test in its own process, so no other test moves blocks of
//! its class meanwhile): a thread that frees what another allocated hands its full lists to
//! the pool, and a thread that runs dry takes them back instead of asking the system.
#![allow(clippy::unwrap_used)]

use antler_alloc::{class_capacity, release_thread_cache, shared_bytes, ThreadCache};

#[global_allocator]
static GLOBAL: ThreadCache = ThreadCache;

#[test]
fn full_lists_move_from_the_freeing_thread_to_the_allocating_one() {
    const N: usize = 5_000;
    const SIZE: usize = 48;
    let batch = class_capacity(SIZE) as usize;
    let made: Vec<Box<[u8; SIZE]>> = (0..N).map(|_| Box::new([1; SIZE])).collect();
    let base = shared_bytes();
    // The freeing thread (as the store's writer drops what runtime threads built): its list
    // of the class fills, and each further block first sends the full list to the pool.
    let spilled = std::thread::spawn(move || {
        drop(made);
        shared_bytes()
    })
    .join()
    .unwrap();
    let batches = (N - 1) / batch;
    assert_eq!(
        spilled - base,
        batches * batch * SIZE,
        "the freeing thread's full lists did not reach the pool"
    );
    // This thread's list is empty: every allocation of the class past a batch takes the next
    // one from the pool, until it is empty again.
    release_thread_cache();
    let again: Vec<Box<[u8; SIZE]>> = (0..N).map(|_| Box::new([2; SIZE])).collect();
    assert_eq!(
        shared_bytes(),
        base,
        "the allocating thread did not take the batches"
    );
    assert!(again.iter().all(|b| b.iter().all(|&x| x == 2)));
}
