//! Who drives a run: lease owners and whether their process is still alive.
//!
//! Several `antler` processes may share one database (a CLI run per thread, a server). Each
//! active run row carries a lease: the owner's identity and an expiry the owner keeps pushing
//! forward (heartbeat). A run is an orphan when its lease expired, or — on the same machine —
//! when the owner process is gone. The second test lets a restart right after `kill -9` reclaim
//! the run at once instead of waiting out the lease.
//!
//! An owner id is `host/pid/start`: `host` is the host name plus the kernel boot id (so a
//! reboot changes it), `start` the process start time from `/proc/<pid>/stat` (so a recycled pid
//! is not mistaken for the owner). Where `/proc` is unavailable, only lease expiry counts.

use std::sync::OnceLock;

/// The identity of a process holding run leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOwner {
    id: String,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn this_host() -> String {
    let name = read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned());
    let boot: String = read_trimmed("/proc/sys/kernel/random/boot_id")
        .map(|b| b.chars().filter(|c| *c != '-').take(12).collect())
        .unwrap_or_default();
    // The id uses '/' as separator; keep it out of the host part.
    format!("{}@{boot}", name.replace('/', "_"))
}

/// `(state, start time)` of a process from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 (starttime) is the 20th after the state (field 3).
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

impl LeaseOwner {
    /// This process (computed once).
    pub fn current() -> &'static LeaseOwner {
        static CURRENT: OnceLock<LeaseOwner> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let pid = std::process::id();
            let start = proc_stat(pid)
                .map(|(_, s)| s.to_string())
                .unwrap_or_default();
            LeaseOwner {
                id: format!("{}/{pid}/{start}", this_host()),
            }
        })
    }

    /// An owner from its stored id.
    pub fn from_id(id: impl Into<String>) -> LeaseOwner {
        LeaseOwner { id: id.into() }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    fn parts(&self) -> Option<(&str, u32, Option<u64>)> {
        let mut it = self.id.split('/');
        let host = it.next()?;
        let pid = it.next()?.parse().ok()?;
        let start = it.next().and_then(|s| s.parse().ok());
        Some((host, pid, start))
    }

    /// Whether the owning process may still be running. `false` only when it is certainly gone:
    /// same machine and boot, and its pid is free, a zombie, or now another process.
    pub fn is_alive(&self) -> bool {
        let me = LeaseOwner::current();
        if self == me {
            return true;
        }
        let (Some((host, pid, start)), Some((my_host, _, my_start))) = (self.parts(), me.parts())
        else {
            return true;
        };
        if host != my_host || my_start.is_none() {
            // Another machine, or no /proc here: only the lease expiry can tell.
            return true;
        }
        match proc_stat(pid) {
            None => false,
            Some(('Z' | 'X' | 'x', _)) => false,
            Some((_, s)) => start.is_none_or(|want| want == s),
        }
    }
}
