//! `sandbox.limits`: a cgroup leaf per sandbox for memory and processes where one can be made
//! (cgroup v2 with the controller delegated, or the v1 `pids`/`memory` hierarchies), rlimits
//! otherwise; the file-size cap is always `RLIMIT_FSIZE`.
//!
//! The leaf is created by stage 1 before it leaves the host namespaces, and stage 1 moves
//! itself in, so every process of the sandbox is counted. It is removed when stage 1 ends; a
//! leaf left behind by a killed helper is removed by [`sweep_stale`] at the next start.

use std::path::{Path, PathBuf};

use crate::settings::Limits;

/// Leaf names start with this, so stale ones can be found.
pub const LEAF_PREFIX: &str = "antler-sandbox-";

/// Processes the warden itself adds to the sandbox's count (stages 1–3).
const WARDEN_PROCESSES: u64 = 3;

/// Where this process sits in each hierarchy it could use.
struct Mounts {
    /// cgroup v2 mount point.
    v2: Option<PathBuf>,
    /// v1 mount points by controller.
    v1_pids: Option<PathBuf>,
    v1_memory: Option<PathBuf>,
}

fn mounts() -> Mounts {
    let mut m = Mounts {
        v2: None,
        v1_pids: None,
        v1_memory: None,
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return m;
    };
    for line in info.lines() {
        // `… mount_point options - fstype source super_options`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).map(PathBuf::from);
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or_default();
        let opts = r.nth(1).unwrap_or_default();
        match fstype {
            "cgroup2" if m.v2.is_none() => m.v2 = mount_point,
            "cgroup" => {
                let has = |c: &str| opts.split(',').any(|o| o == c);
                if has("pids") {
                    m.v1_pids = mount_point.clone();
                }
                if has("memory") {
                    m.v1_memory = mount_point;
                }
            }
            _ => {}
        }
    }
    m
}

/// This process's cgroup path in the hierarchy whose `/proc/self/cgroup` line matches.
fn own_path(v2: bool, controller: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if v2 {
            id == "0" && ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        if hit {
            return Some(PathBuf::from(path.trim_start_matches('/')));
        }
    }
    None
}

/// One created leaf directory.
#[derive(Debug)]
struct Leaf {
    dir: PathBuf,
    /// Where to move back to before removing the leaf.
    parent: PathBuf,
}

/// The cgroup leaves of one sandbox; removed on drop (after moving this process out).
#[derive(Debug, Default)]
pub struct Cgroup {
    leaves: Vec<Leaf>,
    /// Which caps the cgroup enforces.
    pub memory: bool,
    pub processes: bool,
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value)
}

fn make_leaf(parent: &Path, name: &str) -> Option<Leaf> {
    let dir = parent.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    Some(Leaf {
        dir,
        parent: parent.to_path_buf(),
    })
}

impl Cgroup {
    /// Create the leaf (or leaves) for `limits` and move this process in. Caps that cannot be
    /// placed in a cgroup are left to rlimits ([`apply_rlimits`]).
    pub fn create(limits: &Limits, name: &str) -> Cgroup {
        let mut cg = Cgroup::default();
        if limits.memory.is_none() && limits.processes.is_none() {
            return cg;
        }
        let m = mounts();
        if let (Some(root), Some(own)) = (&m.v2, own_path(true, "")) {
            let parent = root.join(own);
            let controllers =
                std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
            let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
            if (limits.memory.is_none() || has("memory"))
                && (limits.processes.is_none() || has("pids"))
            {
                if let Some(leaf) = make_leaf(&parent, name) {
                    let mem_ok = limits.memory.is_none_or(|b| {
                        // Without swap off, a capped sandbox pages out instead of stopping.
                        let _ = write(&leaf.dir.join("memory.swap.max"), "0");
                        write(&leaf.dir.join("memory.max"), &b.to_string()).is_ok()
                    });
                    let pids_ok = limits.processes.is_none_or(|n| {
                        write(
                            &leaf.dir.join("pids.max"),
                            &(n + WARDEN_PROCESSES).to_string(),
                        )
                        .is_ok()
                    });
                    if mem_ok && pids_ok && write(&leaf.dir.join("cgroup.procs"), "0").is_ok() {
                        cg.memory = limits.memory.is_some();
                        cg.processes = limits.processes.is_some();
                        cg.leaves.push(leaf);
                        return cg;
                    }
                    let _ = std::fs::remove_dir(&leaf.dir);
                }
            }
        }
        // cgroup v1: one leaf per controller hierarchy.
        if let (Some(n), Some(root), Some(own)) =
            (limits.processes, &m.v1_pids, own_path(false, "pids"))
        {
            if let Some(leaf) = make_leaf(&root.join(own), name) {
                if write(
                    &leaf.dir.join("pids.max"),
                    &(n + WARDEN_PROCESSES).to_string(),
                )
                .is_ok()
                    && write(&leaf.dir.join("cgroup.procs"), "0").is_ok()
                {
                    cg.processes = true;
                    cg.leaves.push(leaf);
                } else {
                    let _ = std::fs::remove_dir(&leaf.dir);
                }
            }
        }
        if let (Some(b), Some(root), Some(own)) =
            (limits.memory, &m.v1_memory, own_path(false, "memory"))
        {
            if let Some(leaf) = make_leaf(&root.join(own), name) {
                let _ = write(&leaf.dir.join("memory.swappiness"), "0");
                if write(&leaf.dir.join("memory.limit_in_bytes"), &b.to_string()).is_ok()
                    && write(&leaf.dir.join("cgroup.procs"), "0").is_ok()
                {
                    cg.memory = true;
                    cg.leaves.push(leaf);
                } else {
                    let _ = std::fs::remove_dir(&leaf.dir);
                }
            }
        }
        cg
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for leaf in &self.leaves {
            let _ = write(&leaf.parent.join("cgroup.procs"), "0");
            let _ = std::fs::remove_dir(&leaf.dir);
        }
    }
}

/// Remove empty leaves a killed helper left behind (`rmdir` fails on a leaf still in use).
pub fn sweep_stale() {
    let m = mounts();
    let places = [
        m.v2.zip(own_path(true, "")),
        m.v1_pids.zip(own_path(false, "pids")),
        m.v1_memory.zip(own_path(false, "memory")),
    ];
    for (root, own) in places.into_iter().flatten() {
        let Ok(rd) = std::fs::read_dir(root.join(own)) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(LEAF_PREFIX) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

/// Processes the real user of this process runs now (for the `RLIMIT_NPROC` fallback, which
/// counts per user, not per sandbox).
fn user_process_count() -> u64 {
    let uid = nix::unistd::getuid().as_raw();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|v| v.parse::<u32>().ok())
                })
                == Some(uid)
        })
        .count() as u64
}

/// Rlimits on this process (inherited by every command): the file-size cap always; memory
/// (`RLIMIT_AS`) and processes (`RLIMIT_NPROC`, which root ignores) when no cgroup took them.
/// Returns what could not be enforced.
pub fn apply_rlimits(limits: &Limits, cgroup_memory: bool, cgroup_processes: bool) -> Vec<String> {
    use nix::sys::resource::{setrlimit, Resource};
    let mut missing = Vec::new();
    if let Some(b) = limits.file_size {
        if let Err(e) = setrlimit(Resource::RLIMIT_FSIZE, b, b) {
            missing.push(format!("sandbox.limits.file_size not enforced: {e}"));
        }
    }
    if let (Some(b), false) = (limits.memory, cgroup_memory) {
        if let Err(e) = setrlimit(Resource::RLIMIT_AS, b, b) {
            missing.push(format!("sandbox.limits.memory not enforced: {e}"));
        }
    }
    if let (Some(n), false) = (limits.processes, cgroup_processes) {
        if nix::unistd::getuid().is_root() {
            missing.push(
                "sandbox.limits.processes not enforced: no pids cgroup available and RLIMIT_NPROC does not bind root"
                    .to_owned(),
            );
        } else {
            let cap = user_process_count() + n;
            if let Err(e) = setrlimit(Resource::RLIMIT_NPROC, cap, cap) {
                missing.push(format!("sandbox.limits.processes not enforced: {e}"));
            }
        }
    }
    missing
}
