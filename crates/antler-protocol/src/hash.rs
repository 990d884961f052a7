//! Hash maps for the harness's own bookkeeping on the step path (message ids, run scratchpad
//! keys, thread heads, tool names): foldhash instead of std's SipHash, which cost ~250
//! instructions a lookup there. Seeded per process and per map, so keys a client or a model
//! picks (thread and message ids) cannot be aimed at one bucket without the seed.

use std::collections::{HashMap, HashSet};

/// The hasher of [`FastMap`] and [`FastSet`].
pub type FastState = foldhash::fast::RandomState;

/// A `HashMap` with [`FastState`]; build it with `FastMap::default()`.
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// A `HashSet` with [`FastState`]; build it with `FastSet::default()`.
pub type FastSet<K> = HashSet<K, FastState>;
