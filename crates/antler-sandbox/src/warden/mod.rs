//! The warden: the small helper process that parents every confined bash command of one
//! thread's sandbox (security issue #10, findings 3 and 4).
//!
//! antler never forks bash itself when confining. Per sandbox it starts the helper program
//! ([`crate::HelperCommand`]: `antler sandbox-exec`, or the `antler-sandbox-helper` binary) with
//! an empty environment, and the helper builds, once, everything the thread's commands then
//! share:
//!
//! ```text
//! antler ──stdin/stdout (JSON lines)──► stage 1  host namespaces; joins the sandbox cgroup;
//!                                          │      unshare(user?, pid, mount, net?)
//!                                          └─► stage 2  PID 1 of the new PID namespace: makes
//!                                                       mounts private, mounts a fresh /proc,
//!                                                       binds the thread's own /tmp, applies
//!                                                       Landlock (read allow-list without the
//!                                                       data home, writes only in the thread),
//!                                                       then serves exec requests (each
//!                                                       command its own process group) and
//!                                                       reaps its commands and every orphan
//! ```
//!
//! Without namespaces, stage 1 starts stage 3 instead: Landlock and serving, not PID 1.
//!
//! Lifetime: the serving stage exits on end of input, which is what antler's death (even
//! `kill -9`) produces; when stage 2 (PID 1) exits, the kernel kills every process left in the
//! PID namespace, and stage 1 exits with it. Stages 2 and 3 also hold `PR_SET_PDEATHSIG` on
//! their single-threaded parents. As PID 1, stage 2 ignores every signal a sandboxed process
//! sends it (the kernel drops signals to a namespace's init that it has no handler for).
//! Timeouts are enforced inside the warden (the whole process group of the call is killed).
//!
//! Where a piece is unavailable (no namespaces for this user, no cgroup), `confine: auto` runs
//! with what there is and the [`Ready`] frame says what is missing; `confine: required` refuses.

mod client;
mod launcher;
mod limits;
pub mod protocol;
pub mod rules;
mod stages;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::confine::{default_writable_extras, RuleSpec};
use crate::settings::{Confine, Limits, Network};

pub use client::Warden;
pub(crate) use launcher::Launcher;
pub use limits::{sweep_stale as sweep_stale_cgroups, LEAF_PREFIX};
pub use protocol::Ready;
pub use stages::warden_main;

/// Everything the helper needs to build one sandbox. Passed on the helper's command line:
/// it holds host paths (no secrets), which bash could learn from `pwd` anyway.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// `auto` or `required` (`off` never starts a warden).
    pub mode: Confine,
    /// The thread's `user-data` folder: read-write, the working tree of every command.
    pub user_data: Option<PathBuf>,
    /// Host folder bound over `/tmp` (and used as `/tmp` itself without a mount namespace).
    pub tmp: Option<PathBuf>,
    /// Further read-write folders (writable custom mounts).
    pub writable: Vec<PathBuf>,
    /// Read-only folders that must stay readable even when inside a denied one (skills,
    /// read-only mounts).
    pub readable: Vec<PathBuf>,
    /// Host paths not readable (data home, config files).
    pub deny_read: Vec<PathBuf>,
    pub network: Network,
    pub limits: Limits,
    /// Name of the sandbox's cgroup leaf.
    pub cgroup: String,
}

impl Policy {
    /// The Landlock rules: read everything but the denied paths (the extra readable folders
    /// again), write the thread's folders and /tmp — the sandbox's own when `private_tmp`.
    pub fn rules(&self, private_tmp: bool) -> RuleSpec {
        let mut read = rules::read_roots(std::path::Path::new("/"), &self.deny_read);
        read.extend(self.readable.iter().filter(|p| p.exists()).cloned());
        let mut write: Vec<PathBuf> = self.user_data.iter().cloned().collect();
        write.extend(self.writable.iter().cloned());
        if private_tmp {
            write.extend([PathBuf::from("/tmp"), PathBuf::from("/dev/shm")]);
        } else {
            // The shared /tmp, minus what is denied (a data home under /tmp), plus the
            // thread's own tmp folder, which TMPDIR then names.
            write.extend(self.tmp.iter().cloned());
            for extra in default_writable_extras() {
                write.extend(rules::read_roots(&extra, &self.deny_read));
            }
        }
        write.retain(|p| p.exists());
        RuleSpec {
            read,
            write,
            deny_net: self.network == Network::Deny,
        }
    }
}

/// Which guarantees a warden achieved (reported in its [`Ready`] frame).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guarantees {
    /// Own PID namespace with its own `/proc`: no process outside the sandbox is visible.
    pub pid_namespace: bool,
    /// Own mount namespace: private `/tmp` and `/dev/shm`.
    pub private_tmp: bool,
    /// Every mount but the thread's folders (and /tmp) is read-only for the sandbox.
    pub read_only_system: bool,
    /// Own network namespace (`network: deny`).
    pub network_namespace: bool,
    /// Landlock filesystem rules enforced.
    pub landlock: bool,
    /// Landlock TCP rules enforced (`network: deny`).
    pub landlock_net: bool,
    /// Memory/process caps come from a cgroup (else rlimits).
    pub cgroup: bool,
    /// What could not be set up, one line each.
    pub missing: Vec<String>,
}

impl Guarantees {
    /// What `confine: required` insists on: commands cannot see or read outside processes,
    /// cannot read the data home, cannot write outside the thread (and no network if denied).
    pub fn meets_required(&self, network: Network) -> bool {
        self.pid_namespace
            && self.read_only_system
            && self.landlock
            && (network == Network::Allow || self.network_namespace || self.landlock_net)
    }
}
