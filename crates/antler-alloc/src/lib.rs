//! A per-thread cache of small heap blocks in front of the system allocator.
//!
//! An agent step makes ~500 short-lived allocations (message copies, JSON keys, SQL bindings),
//! almost all of them 1 KiB or less. glibc's own per-thread cache keeps 7 blocks of a size;
//! beyond that a free goes to the arena's bins and a later malloc takes it back out, through
//! `_int_free`/`_int_malloc` and fastbin consolidation: measured with callgrind, ~400
//! instructions per allocation-and-free pair, a fifth of the server's instructions per step.
//!
//! [`ThreadCache`] keeps freed blocks of up to [`LARGEST`] bytes on per-thread free lists, one
//! per size class, and hands them back to the next allocation of the class without entering
//! the system allocator. Every block is an ordinary `malloc` block of its class's full size, so
//! a block freed on another thread than the one that allocated it is fine, and a block the
//! cache does not keep goes back with `free`.
//!
//! Blocks often end on another thread than the one that made them (a checkpoint built on a
//! runtime thread is dropped by the store's writer thread), so a thread's lists alone would
//! fill on one side and run dry on the other. A thread whose list of a class is full hands
//! the whole list to a shared pool as one batch, and a thread whose list is empty takes a
//! batch back: one lock per [`class_capacity`] blocks.
//!
//! Bounded: at most [`class_capacity`] blocks of a class and [`THREAD_BYTES`] in all per
//! thread, [`SHARED_BYTES`] in the shared pool (beyond that a batch goes back to the system
//! allocator); a thread's blocks go back to the system allocator when the thread ends (a
//! pthread key's destructor), so threads that come and go (tokio's blocking pool) leave
//! nothing behind. Larger or over-aligned requests go straight to the system allocator.
//!
//! This is the workspace's one crate with `unsafe` code.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Alignment of every cached block: what `malloc` guarantees on 64-bit targets.
const ALIGN: usize = 16;
/// Up to here, classes are 16 bytes apart.
const FINE: usize = 1024;
const FINE_SHIFT: u32 = 4;
/// From [`FINE`] up to here, 256 bytes apart.
pub const LARGEST: usize = 4096;
const COARSE_SHIFT: u32 = 8;
const FINE_CLASSES: usize = FINE >> FINE_SHIFT;
const CLASSES: usize = FINE_CLASSES + ((LARGEST - FINE) >> COARSE_SHIFT);
/// Most blocks a thread keeps of one class, and the size of a batch: 64, fewer for classes
/// over 512 bytes so that a list holds at most 32 KiB (8 blocks of 4 KiB).
pub const fn class_capacity(size: usize) -> u32 {
    let n = CLASS_BYTES / if size == 0 { 1 } else { size };
    if n > 64 {
        64
    } else {
        n as u32
    }
}
const CLASS_BYTES: usize = 32 * 1024;
/// Most bytes kept per thread (in class sizes).
pub const THREAD_BYTES: usize = 256 * 1024;
/// Most bytes the shared pool holds, all classes together.
pub const SHARED_BYTES: usize = 1024 * 1024;

/// The size class of a request, `None` for what the cache does not serve.
#[inline]
fn class_of(size: usize, align: usize) -> Option<usize> {
    if size == 0 || size > LARGEST || align > ALIGN {
        return None;
    }
    Some(if size <= FINE {
        (size - 1) >> FINE_SHIFT
    } else {
        FINE_CLASSES + ((size - FINE - 1) >> COARSE_SHIFT)
    })
}

/// The size every block of class `c` is allocated with.
#[inline]
fn class_size(c: usize) -> usize {
    match SIZES.get(c) {
        Some(&s) => s as usize,
        None => 0,
    }
}

const fn size_of_class(c: usize) -> usize {
    if c < FINE_CLASSES {
        (c + 1) << FINE_SHIFT
    } else {
        FINE + ((c + 1 - FINE_CLASSES) << COARSE_SHIFT)
    }
}

/// Sizes and capacities by class, computed once at compile time (no division per free).
static SIZES: [u32; CLASSES] = {
    let mut t = [0; CLASSES];
    let mut c = 0;
    while c < CLASSES {
        t[c] = size_of_class(c) as u32;
        c += 1;
    }
    t
};
static CAPACITIES: [u32; CLASSES] = {
    let mut t = [0; CLASSES];
    let mut c = 0;
    while c < CLASSES {
        t[c] = class_capacity(size_of_class(c));
        c += 1;
    }
    t
};

#[inline]
fn capacity(c: usize) -> u32 {
    CAPACITIES.get(c).copied().unwrap_or(0)
}

#[inline]
fn class_layout(c: usize) -> Layout {
    // Class sizes are multiples of 16 (a power of two), far below isize::MAX.
    match Layout::from_size_align(class_size(c), ALIGN) {
        Ok(l) => l,
        Err(_) => unreachable_layout(),
    }
}

#[cold]
fn unreachable_layout() -> ! {
    std::process::abort()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing kept yet; the thread-exit release is not registered.
    Fresh,
    Active,
    /// The thread is ending (or its release could not be registered): nothing is kept.
    Closed,
}

/// One thread's free lists: a freed block's first word links to the next block of its class.
struct Cache {
    heads: [*mut u8; CLASSES],
    counts: [u32; CLASSES],
    bytes: usize,
    state: State,
}

impl Cache {
    const fn new() -> Cache {
        Cache {
            heads: [ptr::null_mut(); CLASSES],
            counts: [0; CLASSES],
            bytes: 0,
            state: State::Fresh,
        }
    }

    #[inline]
    fn pop(&mut self, c: usize) -> Option<*mut u8> {
        let mut head = *self.heads.get(c)?;
        if head.is_null() {
            head = self.refill(c)?;
        }
        // SAFETY: `head` is a block this list owns (pushed by `push`), at least 16 bytes and
        // 16-aligned, whose first word `push` set to the next block.
        self.heads[c] = unsafe { head.cast::<*mut u8>().read() };
        self.counts[c] -= 1;
        self.bytes -= class_size(c);
        Some(head)
    }

    /// Take a batch of class `c` from the shared pool (the list is empty).
    #[cold]
    fn refill(&mut self, c: usize) -> Option<*mut u8> {
        let size = class_size(c);
        let bytes = capacity(c) as usize * size;
        if (self.state != State::Active && !self.activate()) || self.bytes + bytes > THREAD_BYTES {
            return None;
        }
        let head = SHARED.take(c, bytes)?;
        self.heads[c] = head;
        self.counts[c] = capacity(c);
        self.bytes += bytes;
        Some(head)
    }

    /// Hand the full list of class `c` to the shared pool; false if it would not take it.
    #[cold]
    fn spill(&mut self, c: usize) -> bool {
        let size = class_size(c);
        let bytes = self.counts[c] as usize * size;
        if !SHARED.give(c, self.heads[c], bytes) {
            return false;
        }
        self.heads[c] = ptr::null_mut();
        self.counts[c] = 0;
        self.bytes -= bytes;
        true
    }

    /// Keep `block` (of class `c`, no longer used by anyone); false when it must be freed.
    #[inline]
    fn push(&mut self, c: usize, block: *mut u8) -> bool {
        if self.state != State::Active && !self.activate() {
            return false;
        }
        let size = class_size(c);
        let Some(&n) = self.counts.get(c) else {
            return false;
        };
        if n >= capacity(c) && !self.spill(c) {
            return false;
        }
        if self.bytes + size > THREAD_BYTES {
            return false;
        }
        // SAFETY: the caller gives up `block`, a live block of `size` ≥ 16 bytes, 16-aligned:
        // its first word is ours to write.
        unsafe { block.cast::<*mut u8>().write(self.heads[c]) };
        self.heads[c] = block;
        self.counts[c] += 1;
        self.bytes += size;
        true
    }

    #[cold]
    fn activate(&mut self) -> bool {
        if self.state == State::Fresh {
            self.state = if register_release() {
                State::Active
            } else {
                State::Closed
            };
        }
        self.state == State::Active
    }

    /// Give every kept block back to the system allocator and keep none from now on.
    fn close(&mut self) {
        self.state = State::Closed;
        for c in 0..CLASSES {
            while let Some(block) = self.pop(c) {
                // SAFETY: cached blocks were allocated by `System` with the class layout.
                unsafe { System.dealloc(block, class_layout(c)) };
            }
        }
    }
}

/// The shared pool: per class, a stack of full batches. A batch is a thread's list as it was
/// (linked through each block's first word); batches are linked through the second word of
/// their first block (every block has at least two words).
struct Shared {
    classes: [Mutex<Batches>; CLASSES],
    bytes: AtomicUsize,
}

struct Batches(*mut u8);

// SAFETY: the pointers are blocks nobody uses, owned by the pool while they are in it; they
// are only touched under the class's lock.
unsafe impl Send for Batches {}

#[allow(clippy::declare_interior_mutable_const)] // each array element is its own lock
const NO_BATCHES: Mutex<Batches> = Mutex::new(Batches(ptr::null_mut()));

static SHARED: Shared = Shared {
    classes: [NO_BATCHES; CLASSES],
    bytes: AtomicUsize::new(0),
};

impl Shared {
    /// Keep a full list of class `c` (`bytes` in all), unless the pool is at its bound.
    fn give(&self, c: usize, head: *mut u8, bytes: usize) -> bool {
        let Some(lock) = self.classes.get(c) else {
            return false;
        };
        if head.is_null() {
            return false;
        }
        if self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes > SHARED_BYTES {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
            return false;
        }
        let mut top = lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `head` is the first block of a list the caller gives up; its second word
        // is free (the first links the list).
        unsafe { head.cast::<*mut u8>().add(1).write(top.0) };
        top.0 = head;
        true
    }

    /// A full list of class `c` (`bytes` in all), if the pool has one.
    fn take(&self, c: usize, bytes: usize) -> Option<*mut u8> {
        let lock = self.classes.get(c)?;
        let head = {
            let mut top = lock.lock().unwrap_or_else(|e| e.into_inner());
            let head = top.0;
            if head.is_null() {
                return None;
            }
            // SAFETY: `head` is the first block of a batch in the pool; `give` wrote the
            // next batch into its second word.
            top.0 = unsafe { head.cast::<*mut u8>().add(1).read() };
            head
        };
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        Some(head)
    }
}

thread_local! {
    // No destructor of its own (a `const` thread-local without one needs no registration, which
    // could allocate): the pthread key below releases the blocks.
    static CACHE: UnsafeCell<Cache> = const { UnsafeCell::new(Cache::new()) };
}

/// Run `f` on this thread's cache. Nothing in `f` allocates, so no second `&mut` can exist.
#[inline]
fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
    // SAFETY: the cache is only reached through this function, whose callers never re-enter it
    // (they call nothing that allocates through the global allocator).
    CACHE.try_with(|c| f(unsafe { &mut *c.get() })).ok()
}

static RELEASE_KEY: OnceLock<Option<libc::pthread_key_t>> = OnceLock::new();

/// Bytes given back by ending threads, over the process's life (diagnostics, tests).
static RELEASED_AT_EXIT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn release_at_exit(_: *mut libc::c_void) {
    with_cache(|k| {
        let bytes = k.bytes;
        k.close();
        RELEASED_AT_EXIT.fetch_add(bytes, Ordering::Relaxed);
    });
}

/// Bytes that ending threads gave back to the system allocator so far.
pub fn released_at_exit() -> usize {
    RELEASED_AT_EXIT.load(Ordering::Relaxed)
}

/// Make the thread's exit release its blocks: a pthread key with a destructor, set to a
/// non-null value on this thread. False if the key cannot be had (then nothing is cached).
fn register_release() -> bool {
    let key = RELEASE_KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is a valid place for the new key; the destructor is a plain C function.
        let rc = unsafe { libc::pthread_key_create(&mut key, Some(release_at_exit)) };
        (rc == 0).then_some(key)
    });
    match key {
        // SAFETY: `key` was created above; the value is only a marker (never dereferenced).
        Some(key) => unsafe { libc::pthread_setspecific(*key, ptr::dangling::<u8>().cast()) == 0 },
        None => false,
    }
}

/// The global allocator of the `antler` binary (see the crate docs).
pub struct ThreadCache;

// SAFETY: every block handed out is either a fresh `System` block or a cached one that was
// freed (so no longer in use) and has at least the requested size and alignment, because a
// class's blocks all have the class's full size and 16-byte alignment; blocks of a class are
// only ever returned to the same class or to `System` with the class layout.
unsafe impl GlobalAlloc for ThreadCache {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(layout.size(), layout.align()) {
            Some(c) => match with_cache(|k| k.pop(c)).flatten() {
                Some(block) => block,
                // SAFETY: the class layout has a non-zero size.
                None => unsafe { System.alloc(class_layout(c)) },
            },
            // SAFETY: forwarded as given.
            None => unsafe { System.alloc(layout) },
        }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match class_of(layout.size(), layout.align()) {
            Some(c) => {
                if with_cache(|k| k.push(c, block)) != Some(true) {
                    // SAFETY: a block of class `c` was allocated with the class layout.
                    unsafe { System.dealloc(block, class_layout(c)) }
                }
            }
            // SAFETY: allocated by `System` with this very layout.
            None => unsafe { System.dealloc(block, layout) },
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(layout.size(), layout.align()) {
            Some(c) => match with_cache(|k| k.pop(c)).flatten() {
                Some(block) => {
                    // SAFETY: the block has at least `layout.size()` writable bytes.
                    unsafe { block.write_bytes(0, layout.size()) };
                    block
                }
                // SAFETY: the class layout has a non-zero size.
                None => unsafe { System.alloc_zeroed(class_layout(c)) },
            },
            // SAFETY: forwarded as given.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = class_of(layout.size(), layout.align());
        let new = class_of(new_size, layout.align());
        match (old, new) {
            // SAFETY: neither size is served by the cache: the block is `System`'s.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            // The block already has the class's full size.
            (Some(a), Some(b)) if a == b => block,
            _ => {
                // SAFETY: `new_size` is non-zero and, with the old alignment, a valid layout
                // (the `GlobalAlloc::realloc` contract).
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: a valid, non-zero layout.
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    // SAFETY: the old block holds `layout.size()` initialized bytes, the new one
                    // has room for `new_size`, they are distinct blocks; the old one is freed
                    // with the layout it was allocated with and not used after.
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

/// Bytes this thread's cache holds now (in class sizes); for tests and diagnostics.
pub fn cached_bytes() -> usize {
    with_cache(|k| k.bytes).unwrap_or(0)
}

/// Bytes the shared pool holds now (in class sizes); for tests and diagnostics.
pub fn shared_bytes() -> usize {
    SHARED.bytes.load(Ordering::Relaxed)
}

/// Give this thread's cached blocks back now (they are anyway when the thread ends).
pub fn release_thread_cache() {
    with_cache(|k| {
        let state = k.state;
        k.close();
        // Keep caching afterwards if it was on (the exit release is still registered).
        k.state = state;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_refuses_an_empty_list_without_counting_it() {
        let before = shared_bytes();
        assert!(!SHARED.give(3, ptr::null_mut(), 4096));
        assert_eq!(shared_bytes(), before);
        assert_eq!(class_capacity(0), 64);
    }

    #[test]
    fn every_size_lands_in_a_class_that_holds_it() {
        let mut last = None;
        for size in 1..=LARGEST {
            let c = class_of(size, 8).unwrap();
            assert!(c < CLASSES, "size {size}");
            assert!(class_size(c) >= size, "size {size} in class {c}");
            assert_eq!(class_size(c) % ALIGN, 0);
            // Classes never shrink as sizes grow, and a class's size is its largest member.
            if let Some(prev) = last {
                assert!(c >= prev);
            }
            if c > 0 {
                assert!(class_size(c - 1) < size, "size {size} fits a smaller class");
            }
            last = Some(c);
        }
        assert_eq!(class_of(LARGEST, 8), Some(CLASSES - 1));
        assert_eq!(class_size(CLASSES - 1), LARGEST);
        assert_eq!(class_of(LARGEST + 1, 8), None);
        assert_eq!(class_of(0, 8), None);
        assert_eq!(class_of(64, 32), None);
        assert_eq!(class_of(64, 16), class_of(64, 1));
        for c in 0..CLASSES {
            assert_eq!(class_size(c), size_of_class(c));
            let cap = capacity(c) as usize;
            assert!((8..=64).contains(&cap), "class {c}: {cap}");
            assert!(cap * class_size(c) <= CLASS_BYTES, "class {c}");
        }
    }
}
