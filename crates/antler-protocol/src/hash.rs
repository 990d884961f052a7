//! Hash maps for the harness's own bookkeeping on the step path (message ids, run scratchpad
//! keys, thread heads, tool names): foldhash instead of std's SipHash, which cost ~250
//! instructions a lookup there. Seeded per process and per map, so keys a client or a model
//! picks (thread and message ids) cannot be aimed at one bucket without the seed. [`AddrMap`]
//! is for caches keyed by an object's address.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher of [`FastMap`] and [`FastSet`].
pub type FastState = foldhash::fast::RandomState;

/// A `HashMap` with [`FastState`]; build it with `FastMap::default()`.
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A `HashSet` with [`FastState`]; build it with `FastSet::default()`.
pub type FastSet<K> = HashSet<K, FastState>;

/// A map keyed by an address (`Arc::as_ptr` as `usize`), for caches of per-object encodings.
pub type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

/// Hashes an address: one multiply, rotated so the low bits — hashbrown's bucket index — come
/// from the middle of the product; an aligned address's own low bits are zero, and a bare
/// multiply would leave them zero, so every probe would start at a multiple of the alignment.
/// Not for keys an outsider chooses: there is no seed.
#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64((self.0 << 8) | u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(26);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::AddrHasher;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<AddrHasher>::default();
        // 1,024 addresses 16 bytes apart, as an allocator hands them out, into 1,024 buckets
        // (the low ten bits, as hashbrown indexes them).
        let base = 0x7f3a_5c00_1000_usize;
        let buckets: HashSet<u64> = (0..1024)
            .map(|i| build.hash_one(base + 16 * i) & 1023)
            .collect();
        // A bare multiply would use 64 of them; a uniform hash fills ~647 (1 - 1/e).
        assert!(buckets.len() > 550, "{} buckets used", buckets.len());
    }
}
