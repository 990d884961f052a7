//! How many leading items two lists share by allocation, for the caches that keep a copy of a
//! thread's message list (token tallies, encoded-history memos, request views, replay chains)
//! and must find, on every model call, where the new list stops being the one they saw.
//!
//! With a long history that comparison runs over every message on every step, so it is written
//! to compile to wide compares: eight pointers a round, with no early exit inside a round
//! (~2.5 instructions a message against ~6 for a `take_while` and 14–21 for the loops it
//! replaces).

use std::sync::Arc;

/// Pointers compared per round.
const ROUND: usize = 8;

/// The length of the longest common prefix of `a` and `b`, items compared by address.
pub fn shared_prefix<T>(a: &[Arc<T>], b: &[Arc<T>]) -> usize {
    prefix_by(a, b, Arc::ptr_eq)
}

/// As [`shared_prefix`], against addresses recorded with [`address`] (a cache that holds each
/// item as a `Weak`, which keeps the address from being reused, keeps its addresses apart in
/// one `Vec` so this can compare them in rounds).
pub fn shared_prefix_addrs<T>(addrs: &[usize], b: &[Arc<T>]) -> usize {
    prefix_by(addrs, b, |x, y| *x == address(y))
}

/// How many leading pairs `same` holds for, a round at a time.
#[inline]
fn prefix_by<A, B>(a: &[A], b: &[B], same: impl Fn(&A, &B) -> bool) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    for (ra, rb) in a.chunks_exact(ROUND).zip(b.chunks_exact(ROUND)) {
        // `fold` with `&`, not `all`: no branch per item, so the round vectorizes.
        if !ra.iter().zip(rb).fold(true, |acc, (x, y)| acc & same(x, y)) {
            break;
        }
        i += ROUND;
    }
    while i < n && same(&a[i], &b[i]) {
        i += 1;
    }
    i
}

/// The address [`shared_prefix_addrs`] compares. Never 0: a cache may record 0 for "nothing".
pub fn address<T>(item: &Arc<T>) -> usize {
    Arc::as_ptr(item) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<Arc<usize>> {
        (0..n).map(Arc::new).collect()
    }

    /// Every length around the round's width, every position of the first difference, and a
    /// value-equal but distinct item there: only addresses count.
    #[test]
    fn the_prefix_ends_at_the_first_item_that_is_another_allocation() {
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 40] {
            let a = items(len);
            let addrs: Vec<usize> = a.iter().map(address).collect();
            assert_eq!(shared_prefix(&a, &a.clone()), len);
            assert_eq!(shared_prefix_addrs(&addrs, &a), len);
            for at in 0..len {
                let mut b = a.clone();
                b[at] = Arc::new(*a[at]);
                assert_eq!(shared_prefix(&a, &b), at, "len {len}, differing at {at}");
                assert_eq!(shared_prefix(&b, &a), at);
                assert_eq!(shared_prefix_addrs(&addrs, &b), at);
            }
        }
    }

    #[test]
    fn a_list_shares_at_most_the_shorter_length() {
        let a = items(20);
        assert_eq!(shared_prefix(&a, &a[..13]), 13);
        assert_eq!(shared_prefix(&a[..5], &a), 5);
        let addrs: Vec<usize> = a.iter().map(address).collect();
        assert_eq!(shared_prefix_addrs(&addrs[..11], &a), 11);
        assert_eq!(shared_prefix_addrs(&addrs, &a[..3]), 3);
        let released = vec![0; 20];
        assert_eq!(shared_prefix_addrs(&released, &a), 0);
    }
}
