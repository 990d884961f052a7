//! Directory handles for the sandbox's roots, and path resolution *beneath* them.
//!
//! Confined bash may replace a thread folder with a symlink at any moment (`rm -rf outputs &&
//! ln -s / outputs`). Nothing that runs unconfined (file tools, server routes, uploads) may
//! follow that. So:
//!
//! - every root is a [`RootDir`]: a directory handle opened **without following** its last
//!   component (relative to its parent's handle), re-validated before each use by comparing the
//!   handle's device/inode with a fresh no-follow `stat` of the entry. A root that became a
//!   symlink or a file is an `Access denied: … is not a directory` error; one that was recreated
//!   as a real directory is reopened.
//! - every path below a root is resolved beneath its handle with `cap-std` (on Linux `openat2`
//!   with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, elsewhere a checked component walk): `..`,
//!   absolute and `/proc`-style magic symlinks cannot leave it.
//! - absolute symlinks whose target spells a path *inside* the root (what `ln -s
//!   /mnt/user-data/…` becomes after command rewriting) are translated back into the root by
//!   [`Beneath::canonical`]. Only paths the fast resolution refuses pay for that walk.
//!
//! Hard links are out of scope: a hard-linked file is the same inode wherever it is and no path
//! resolution can tell; the upload writers refuse to replace multiply-linked files.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_fs_ext::DirExt;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, MetadataExt, OpenOptions};

use crate::error::SandboxError;
use crate::paths::{
    ThreadDirs, ThreadPaths, VIRTUAL_OUTPUTS, VIRTUAL_UPLOADS, VIRTUAL_USER_DATA, VIRTUAL_WORKSPACE,
};

/// Symlinks followed while resolving one path (Linux's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// The error for a path that leads out of its root (same shape as `cap-std`'s own).
pub(crate) fn escape() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "a path led outside of the filesystem",
    )
}

/// Whether an I/O error means "this path leaves the root": `cap-std`'s escape error (permission
/// denied without an OS code) or a refused magic link (`ELOOP`).
pub fn is_escape(e: &io::Error) -> bool {
    (e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none())
        || e.raw_os_error() == Some(nix::libc::ELOOP)
}

#[derive(Debug)]
enum Anchor {
    /// Opened by path, following symlinks: operator-configured roots (skills, `sandbox.mounts`)
    /// and the parent of a thread's `user-data`, none of which a sandboxed command may replace.
    Ambient,
    /// Entry `name` of `parent`, never followed.
    Child {
        parent: Arc<RootDir>,
        name: OsString,
    },
}

#[derive(Debug)]
struct Opened {
    dir: Dir,
    dev: u64,
    ino: u64,
    /// Canonical host path at open time (translates absolute symlinks back into the root).
    canonical: PathBuf,
}

/// One root (a mount's host directory) held as a handle; see the module docs.
#[derive(Debug)]
pub struct RootDir {
    host: PathBuf,
    label: String,
    anchor: Anchor,
    opened: Mutex<Option<Arc<Opened>>>,
}

impl RootDir {
    /// A root opened by path (symlinks in `host` are followed). `label` names it in errors.
    pub fn ambient(host: impl Into<PathBuf>, label: impl Into<String>) -> Arc<RootDir> {
        Arc::new(RootDir {
            host: host.into(),
            label: label.into(),
            anchor: Anchor::Ambient,
            opened: Mutex::new(None),
        })
    }

    /// Entry `name` of `parent`, which must stay a real directory.
    pub fn child(
        parent: &Arc<RootDir>,
        name: impl Into<OsString>,
        label: impl Into<String>,
    ) -> Arc<RootDir> {
        let name = name.into();
        Arc::new(RootDir {
            host: parent.host.join(&name),
            label: label.into(),
            anchor: Anchor::Child {
                parent: parent.clone(),
                name,
            },
            opened: Mutex::new(None),
        })
    }

    /// `host`'s last component opened no-follow under its parent (opened by path).
    pub fn no_follow(host: &Path, label: impl Into<String>) -> Arc<RootDir> {
        let label = label.into();
        match (host.parent(), host.file_name()) {
            (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => {
                RootDir::child(&RootDir::ambient(parent, label.clone()), name, label)
            }
            _ => RootDir::ambient(host, label),
        }
    }

    /// The host path (the configured spelling).
    pub fn host(&self) -> &Path {
        &self.host
    }

    /// The virtual path naming this root in errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The validated handle; a missing root is `NotFound`.
    pub fn open(&self) -> Result<Beneath, SandboxError> {
        self.current(false).map(|opened| Beneath { opened })
    }

    /// As [`RootDir::open`], creating the root (and missing parents) when it does not exist.
    /// An existing non-directory is never replaced or followed.
    pub fn open_or_create(&self) -> Result<Beneath, SandboxError> {
        self.current(true).map(|opened| Beneath { opened })
    }

    /// Whether the root currently is a usable directory (no creation).
    pub fn is_usable(&self) -> bool {
        self.current(false).is_ok()
    }

    fn not_a_dir(&self) -> SandboxError {
        SandboxError::PermissionDenied(format!(
            "Access denied: {} is not a directory (it was replaced by a symlink or a file)",
            self.label
        ))
    }

    fn io(&self, e: io::Error) -> SandboxError {
        match e.raw_os_error() {
            Some(nix::libc::ELOOP) | Some(nix::libc::ENOTDIR) => self.not_a_dir(),
            _ => SandboxError::from_io(&self.label, e),
        }
    }

    fn cached(&self) -> Option<Arc<Opened>> {
        self.opened.lock().ok().and_then(|g| g.clone())
    }

    /// Refuse what was just stat'ed unless it is a directory; the cached handle if it is still
    /// that directory `(dev, ino)`.
    fn cached_at(
        &self,
        is_dir: bool,
        dev: u64,
        ino: u64,
    ) -> Result<Option<Arc<Opened>>, SandboxError> {
        if !is_dir {
            return Err(self.not_a_dir());
        }
        Ok(self.cached().filter(|c| c.dev == dev && c.ino == ino))
    }

    fn store(&self, dir: Dir, canonical: PathBuf) -> Result<Arc<Opened>, SandboxError> {
        let m = dir.dir_metadata().map_err(|e| self.io(e))?;
        let opened = Arc::new(Opened {
            dir,
            dev: m.dev(),
            ino: m.ino(),
            canonical,
        });
        if let Ok(mut g) = self.opened.lock() {
            *g = Some(opened.clone());
        }
        Ok(opened)
    }

    fn current(&self, create: bool) -> Result<Arc<Opened>, SandboxError> {
        match &self.anchor {
            Anchor::Ambient => {
                let meta = match std::fs::metadata(&self.host) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                        std::fs::create_dir_all(&self.host).map_err(|e| self.io(e))?;
                        std::fs::metadata(&self.host)
                    }
                    other => other,
                }
                .map_err(|e| self.io(e))?;
                use std::os::unix::fs::MetadataExt as _;
                if let Some(c) = self.cached_at(meta.is_dir(), meta.dev(), meta.ino())? {
                    return Ok(c);
                }
                let dir = Dir::open_ambient_dir(&self.host, ambient_authority())
                    .map_err(|e| self.io(e))?;
                let canonical =
                    std::fs::canonicalize(&self.host).unwrap_or_else(|_| self.host.clone());
                self.store(dir, canonical)
            }
            Anchor::Child { parent, name } => {
                let p = parent.current(create)?;
                let meta = match p.dir.symlink_metadata(name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                        match p.dir.create_dir(name) {
                            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                                return Err(self.io(e))
                            }
                            _ => p.dir.symlink_metadata(name),
                        }
                    }
                    other => other,
                }
                .map_err(|e| self.io(e))?;
                if let Some(c) = self.cached_at(meta.is_dir(), meta.dev(), meta.ino())? {
                    return Ok(c);
                }
                // Swapped for a symlink since the stat: ELOOP/ENOTDIR, reported as not a dir.
                let dir = p.dir.open_dir_nofollow(name).map_err(|e| self.io(e))?;
                self.store(dir, p.canonical.join(name))
            }
        }
    }
}

/// A validated root handle, resolving paths beneath it.
#[derive(Clone, Debug)]
pub struct Beneath {
    opened: Arc<Opened>,
}

/// Split `rel` into components; an absolute path or a prefix is an escape.
fn components(rel: &Path) -> io::Result<VecDeque<OsString>> {
    let mut out = VecDeque::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push_back(n.to_os_string()),
            Component::ParentDir => out.push_back(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    Ok(out)
}

fn dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

impl Beneath {
    /// A root opened by path (for callers holding a plain host path, e.g. tests and tools
    /// outside a sandbox).
    pub fn ambient(path: &Path) -> io::Result<Beneath> {
        let dir = Dir::open_ambient_dir(path, ambient_authority())?;
        let m = dir.dir_metadata()?;
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Beneath {
            opened: Arc::new(Opened {
                dev: m.dev(),
                ino: m.ino(),
                dir,
                canonical,
            }),
        })
    }

    /// The root's directory handle.
    pub fn dir(&self) -> &Dir {
        &self.opened.dir
    }

    /// The root's canonical host path (as of opening).
    pub fn canonical_root(&self) -> &Path {
        &self.opened.canonical
    }

    /// `target` relative to the root, when it is an absolute path inside the root.
    fn inside(&self, target: &Path) -> Option<PathBuf> {
        target
            .strip_prefix(&self.opened.canonical)
            .ok()
            .map(Path::to_path_buf)
    }

    /// The canonical form of `rel` relative to the root: symlinks resolved one component at a
    /// time through the handle, absolute targets inside the root translated back. Anything
    /// leaving the root is an escape. `lenient`: a missing tail is appended as spelled (for
    /// paths about to be created).
    pub fn canonical(&self, rel: &Path, lenient: bool) -> io::Result<PathBuf> {
        let mut todo = components(rel)?;
        let mut done = PathBuf::new();
        let mut hops = 0;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                if !done.pop() {
                    return Err(escape());
                }
                continue;
            }
            let next = done.join(&c);
            match self.opened.dir.symlink_metadata(&next) {
                Ok(m) if m.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(escape());
                    }
                    let target = self.opened.dir.read_link_contents(&next)?;
                    let front = if target.is_absolute() {
                        done = PathBuf::new();
                        components(&self.inside(&target).ok_or_else(escape)?)?
                    } else {
                        components(&target)?
                    };
                    for f in front.into_iter().rev() {
                        todo.push_front(f);
                    }
                }
                Ok(_) => done = next,
                Err(e) if lenient && e.kind() == io::ErrorKind::NotFound => {
                    done = next;
                    for rest in todo.drain(..) {
                        if rest == ".." {
                            if !done.pop() {
                                return Err(escape());
                            }
                        } else {
                            done.push(rest);
                        }
                    }
                    return Ok(done);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Run `op` on `rel`; when it is refused as an escape, retry once on the canonical form
    /// (absolute symlinks that stay inside the root). The canonical form keeps a missing tail,
    /// so a path about to be created resolves too; a read of it then fails as not found.
    fn retry<T>(&self, rel: &Path, op: impl Fn(&Dir, &Path) -> io::Result<T>) -> io::Result<T> {
        match op(&self.opened.dir, dot(rel)) {
            Err(e) if is_escape(&e) => {
                let canon = self.canonical(rel, true)?;
                op(&self.opened.dir, dot(&canon))
            }
            other => other,
        }
    }

    /// Open a file beneath the root (symlinks inside the root are followed). Only regular files
    /// and directories open: a FIFO, socket or device planted in the tree is refused without
    /// blocking (opened non-blocking, then checked), so it cannot hang a tool or a route.
    pub fn open_with(&self, rel: &Path, opts: &OpenOptions) -> io::Result<File> {
        use cap_std::fs::OpenOptionsExt;
        let mut opts = opts.clone();
        opts.custom_flags(nix::libc::O_NONBLOCK);
        let f = self.retry(rel, |d, p| d.open_with(p, &opts))?;
        let ft = f.metadata()?.file_type();
        if !(ft.is_file() || ft.is_dir()) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "not a regular file (a FIFO, socket or device)",
            ));
        }
        Ok(f)
    }

    /// Open a file for reading.
    pub fn open(&self, rel: &Path) -> io::Result<std::fs::File> {
        let mut o = OpenOptions::new();
        o.read(true);
        self.open_with(rel, &o).map(File::into_std)
    }

    /// Open a directory beneath the root.
    pub fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        self.retry(rel, |d, p| d.open_dir(p))
    }

    /// Metadata of `rel` (following symlinks inside the root).
    pub fn metadata(&self, rel: &Path) -> io::Result<Metadata> {
        self.retry(rel, |d, p| d.metadata(p))
    }

    /// Create `rel` and its missing parents beneath the root.
    pub fn create_dir_all(&self, rel: &Path) -> io::Result<()> {
        if rel.as_os_str().is_empty() || self.metadata(rel).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        match self.opened.dir.create_dir_all(rel) {
            // An absolute symlink inside the root reads as "exists" or as an escape.
            Err(e) if is_escape(&e) || e.kind() == io::ErrorKind::AlreadyExists => {
                let canon = self.canonical(rel, true)?;
                self.opened.dir.create_dir_all(dot(&canon))
            }
            other => other,
        }
    }
}

/// Options for writing a file: create it, then truncate or append.
pub fn write_options(append: bool) -> OpenOptions {
    let mut o = OpenOptions::new();
    o.write(true).create(true);
    if append {
        o.append(true);
    } else {
        o.truncate(true);
    }
    o
}

/// A thread's four roots: `user-data` (held no-follow under the thread folder) and its three
/// folders (held no-follow under `user-data`).
#[derive(Clone, Debug)]
pub struct ThreadRoots {
    pub user_data: Option<Arc<RootDir>>,
    pub workspace: Arc<RootDir>,
    pub uploads: Arc<RootDir>,
    pub outputs: Arc<RootDir>,
}

impl ThreadRoots {
    /// The roots of a thread's folders.
    pub fn new(paths: &ThreadPaths) -> ThreadRoots {
        ThreadRoots::from_dirs(&ThreadDirs::from(paths))
    }

    /// The roots of three folders read back from state. When they share one parent, that
    /// parent is the `user-data` root and each folder is held under it; otherwise each folder
    /// is held no-follow under its own parent.
    pub fn from_dirs(dirs: &ThreadDirs) -> ThreadRoots {
        let named = [
            (&dirs.workspace, VIRTUAL_WORKSPACE),
            (&dirs.uploads, VIRTUAL_UPLOADS),
            (&dirs.outputs, VIRTUAL_OUTPUTS),
        ];
        let user_data = dirs
            .user_data_root()
            .map(|ud| RootDir::no_follow(&ud, VIRTUAL_USER_DATA));
        let [w, u, o] = named.map(|(host, label)| match (&user_data, host.file_name()) {
            (Some(ud), Some(name)) => RootDir::child(ud, name, label),
            _ => RootDir::no_follow(host, label),
        });
        ThreadRoots {
            user_data,
            workspace: w,
            uploads: u,
            outputs: o,
        }
    }

    /// The root of one of the three folders by its name under `user-data`.
    pub fn folder(&self, name: &OsStr) -> Option<&Arc<RootDir>> {
        [&self.workspace, &self.uploads, &self.outputs]
            .into_iter()
            .find(|r| r.host().file_name() == Some(name))
    }

    /// Open a thread file for reading by its virtual path (`/mnt/user-data/{folder}/…`): the
    /// folder must still be a real directory, and the path resolves beneath `user-data` (so a
    /// link from one folder into another keeps working, one leaving the tree does not).
    pub fn open_virtual(&self, virtual_path: &str) -> Result<std::fs::File, SandboxError> {
        crate::mapping::reject_traversal(virtual_path)?;
        let rest = virtual_path
            .strip_prefix(VIRTUAL_USER_DATA)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| SandboxError::NotFound(virtual_path.to_owned()))?;
        let rel = Path::new(rest);
        let folder = match rel.components().next() {
            Some(Component::Normal(first)) => self.folder(first),
            _ => None,
        }
        .ok_or_else(|| SandboxError::NotFound(virtual_path.to_owned()))?;
        let folder_handle = folder.open()?;
        let opened = match &self.user_data {
            Some(ud) => ud.open()?.open(rel),
            None => folder_handle.open(
                rel.strip_prefix(folder.host().file_name().unwrap_or_default())
                    .unwrap_or(rel),
            ),
        };
        opened.map_err(|e| SandboxError::from_io(virtual_path, e))
    }

    /// Create the missing folders without following anything; a folder replaced by a symlink
    /// or a file is left alone (every access to it is refused) and logged.
    pub fn ensure(&self) -> io::Result<()> {
        for r in [&self.workspace, &self.uploads, &self.outputs] {
            match r.open_or_create() {
                Ok(_) => {}
                Err(SandboxError::PermissionDenied(reason)) => {
                    tracing::warn!(folder = r.label(), %reason, "thread folder is unusable");
                }
                Err(SandboxError::Io { source, .. }) => return Err(source),
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn canonical_resolves_inside_and_refuses_outside() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a/b", root.join("rel")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("abs")).unwrap();
        std::os::unix::fs::symlink("/", root.join("up")).unwrap();
        std::os::unix::fs::symlink("../..", root.join("a/dotdot")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        let b = Beneath::ambient(&root).unwrap();
        assert_eq!(
            b.canonical(Path::new("rel"), false).unwrap(),
            Path::new("a/b")
        );
        assert_eq!(
            b.canonical(Path::new("abs/b/new/x"), true).unwrap(),
            Path::new("a/b/new/x")
        );
        assert!(b.canonical(Path::new("abs/b/new"), false).is_err());
        for bad in ["up", "up/etc", "a/dotdot", "a/dotdot/x", "loop", "/etc"] {
            assert!(
                is_escape(&b.canonical(Path::new(bad), true).unwrap_err()),
                "{bad}"
            );
        }
        // The fast path refuses the absolute link; the retry translates it.
        assert!(b.metadata(Path::new("abs/b")).unwrap().is_dir());
        assert!(is_escape(&b.metadata(Path::new("up/etc")).unwrap_err()));
    }

    #[test]
    fn roots_are_revalidated() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path();
        let p = ThreadPaths::new(home, "t1", None).unwrap();
        let roots = ThreadRoots::new(&p);
        roots.ensure().unwrap();
        assert!(p.outputs.is_dir());
        roots.outputs.open().unwrap();
        std::fs::remove_dir(&p.outputs).unwrap();
        std::os::unix::fs::symlink(home, &p.outputs).unwrap();
        let e = roots.outputs.open().unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        assert!(roots.outputs.open_or_create().is_err());
        // ensure() leaves it alone and does not fail.
        roots.ensure().unwrap();
        assert!(std::fs::symlink_metadata(&p.outputs)
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_file(&p.outputs).unwrap();
        std::fs::create_dir(&p.outputs).unwrap();
        roots.outputs.open().unwrap();
    }
}
