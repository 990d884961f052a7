//! The cache as the process's global allocator: blocks come back, contents survive every
//! resize, zeroed requests are zero on a reused block, the bounds hold, and ending threads
//! give their blocks back.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout};

use antler_alloc::{
    cached_bytes, release_thread_cache, released_at_exit, shared_bytes, ThreadCache, LARGEST,
    SHARED_BYTES, THREAD_BYTES,
};

#[global_allocator]
static GLOBAL: ThreadCache = ThreadCache;

#[test]
fn a_freed_block_serves_the_next_request_of_its_class() {
    release_thread_cache();
    // (Its block may come from a batch of the shared pool: other tests run beside this one.)
    let a = vec![0xAB_u8; 200];
    let addr = a.as_ptr();
    let before = cached_bytes();
    drop(a);
    assert_eq!(
        cached_bytes(),
        before + 208,
        "a 200-byte block is kept in its 208-byte class"
    );
    // Same class (193..=208 bytes), zeroed: the dirty block comes back cleared. (A heap
    // buffer on purpose: `vec!` of zeros asks the allocator for zeroed memory.)
    #[allow(clippy::useless_vec)]
    let b = vec![0_u8; 193];
    assert_eq!(b.as_ptr(), addr, "the kept block was not reused");
    assert!(b.iter().all(|&x| x == 0), "a reused block was not zeroed");
    assert_eq!(cached_bytes(), before);
}

#[test]
fn contents_survive_growth_and_shrinking_across_classes() {
    let mut v: Vec<u32> = Vec::new();
    for i in 0..5_000_u32 {
        v.push(i.wrapping_mul(2_654_435_761));
    }
    v.truncate(300);
    v.shrink_to_fit();
    v.truncate(3);
    v.shrink_to_fit();
    let want: Vec<u32> = (0..3_u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    assert_eq!(v, want);
    let mut s = String::new();
    for i in 0..2_000 {
        s.push_str(&i.to_string());
    }
    let long = s.clone();
    s.shrink_to(10);
    assert_eq!(s, long);
}

#[test]
fn a_thread_keeps_a_bounded_amount() {
    release_thread_cache();
    let blocks: Vec<Box<[u8; 64]>> = (0..10_000).map(|_| Box::new([7; 64])).collect();
    drop(blocks);
    // 64 of the 64-byte class at most; the rest went to the shared pool in batches of 64, or
    // back to the system allocator once the pool was full.
    assert!(
        cached_bytes() > 0 && cached_bytes() <= 64 * 64,
        "{}",
        cached_bytes()
    );
    assert!(shared_bytes() <= SHARED_BYTES, "{}", shared_bytes());
    let mut sizes: Vec<Vec<u8>> = Vec::new();
    for size in (1..=LARGEST).step_by(16) {
        for _ in 0..100 {
            sizes.push(vec![1; size]);
        }
    }
    drop(sizes);
    assert!(cached_bytes() <= THREAD_BYTES, "{}", cached_bytes());
    assert!(shared_bytes() <= SHARED_BYTES, "{}", shared_bytes());
    release_thread_cache();
    assert_eq!(cached_bytes(), 0);
}

#[test]
fn an_ending_thread_gives_its_blocks_back() {
    let before = released_at_exit();
    let kept = std::thread::spawn(|| {
        let blocks: Vec<Vec<u8>> = (0..50).map(|i| vec![3; 100 + i]).collect();
        drop(blocks);
        cached_bytes()
    })
    .join()
    .unwrap();
    assert!(kept > 0);
    assert!(
        released_at_exit() >= before + kept,
        "{kept} bytes not released"
    );
}

#[test]
fn blocks_freed_on_another_thread_are_reused_there() {
    let data: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; 500]).collect();
    let sum: u64 = data.iter().flatten().map(|&b| u64::from(b)).sum();
    let (got, kept) = std::thread::spawn(move || {
        let got: u64 = data.iter().flatten().map(|&b| u64::from(b)).sum();
        drop(data);
        let kept = cached_bytes();
        // Reuse them here.
        let again: Vec<Vec<u8>> = (0..20).map(|_| vec![9; 500]).collect();
        assert!(again.iter().flatten().all(|&b| b == 9));
        (got, kept)
    })
    .join()
    .unwrap();
    assert_eq!(got, sum);
    assert!(kept >= 20 * 512);
}

#[test]
fn over_aligned_and_large_requests_bypass_the_cache() {
    let layout = Layout::from_size_align(64, 64).unwrap();
    // SAFETY: a valid, non-zero layout; the block is freed with the same layout.
    unsafe {
        let p = GLOBAL.alloc(layout);
        assert!(!p.is_null());
        assert_eq!(p as usize % 64, 0);
        p.write_bytes(5, 64);
        let q = GLOBAL.realloc(p, layout, 5_000);
        assert_eq!(q as usize % 64, 0);
        assert!(std::slice::from_raw_parts(q, 64).iter().all(|&b| b == 5));
        GLOBAL.dealloc(q, Layout::from_size_align(5_000, 64).unwrap());
    }
    release_thread_cache();
    drop(vec![1_u8; LARGEST + 1]);
    assert_eq!(cached_bytes(), 0);
}

#[test]
fn threads_churning_blocks_never_see_each_others_data() {
    // Each thread fills its blocks with its own byte and checks it before freeing; blocks hop
    // between threads through a channel, so cross-thread frees and reuse mix.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let handles: Vec<_> = (0..4_u8)
        .map(|t| {
            let tx = tx.clone();
            let rx = rx.clone();
            std::thread::spawn(move || {
                let mut seed = u32::from(t) + 1;
                let mut live: Vec<Vec<u8>> = Vec::new();
                for _ in 0..20_000 {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    let size = (seed % 5_000) as usize + 1;
                    match seed % 4 {
                        0 => live.push(vec![t; size]),
                        1 => {
                            if let Some(mut v) = live.pop() {
                                assert!(v.iter().all(|&b| b == t));
                                v.resize(size, t);
                                live.push(v);
                            }
                        }
                        2 => {
                            if let Some(v) = live.pop() {
                                assert!(v.iter().all(|&b| b == t));
                                tx.send(v).unwrap();
                            }
                        }
                        _ => {
                            if let Ok(v) = rx.lock().unwrap().try_recv() {
                                let first = v.first().copied();
                                assert!(v.iter().all(|&b| Some(b) == first));
                            }
                        }
                    }
                }
                for v in &live {
                    assert!(v.iter().all(|&b| b == t));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
