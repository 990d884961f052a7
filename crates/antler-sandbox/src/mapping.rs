//! Virtual ↔ host path translation (spec 50 §3.3).
//!
//! A [`Mapper`] holds the mount table of one sandbox. It locates virtual paths (longest
//! container prefix, segment boundary) and holds each mount root as a directory handle that
//! paths are resolved beneath ([`crate::beneath`]), maps host paths back, and rewrites paths
//! inside text in both directions: container → host in shell commands and written file
//! content, host → container in everything the model reads.

use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::beneath::RootDir;
use crate::error::SandboxError;

/// One mount: what the agent sees at `container`, backed by host directory `host`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathMapping {
    pub container: String,
    pub host: PathBuf,
    pub read_only: bool,
    /// The root must stay a real directory: its last component is never followed (a thread
    /// folder, which a sandboxed command can replace with a symlink). Other roots are opened by
    /// path, so an operator's symlinked `host_path` keeps working.
    pub pinned: bool,
}

impl PathMapping {
    pub fn new(container: impl Into<String>, host: impl Into<PathBuf>, read_only: bool) -> Self {
        PathMapping {
            container: container.into(),
            host: host.into(),
            read_only,
            pinned: false,
        }
    }

    /// A writable thread folder (see [`PathMapping::pinned`]).
    pub fn pinned(container: impl Into<String>, host: impl Into<PathBuf>) -> Self {
        PathMapping {
            pinned: true,
            ..PathMapping::new(container, host, false)
        }
    }
}

/// A resolved virtual path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Canonical host path (symlinks inside the mount resolved, a missing tail appended).
    pub host: PathBuf,
    /// Writes must be refused.
    pub read_only: bool,
}

/// A virtual path located in the mount table, not yet touched on disk.
#[derive(Clone, Debug)]
pub struct Located<'a> {
    /// Index of the mapping (and of its root, see [`Mapper::root`]).
    pub index: usize,
    pub mapping: &'a PathMapping,
    /// The path below the mount root (no `..`, no leading `/`).
    pub rel: PathBuf,
}

/// `Access denied: path traversal detected` when any segment is `..` (either separator).
pub fn reject_traversal(path: &str) -> Result<(), SandboxError> {
    if path.replace('\\', "/").split('/').any(|s| s == "..") {
        return Err(traversal());
    }
    Ok(())
}

pub(crate) fn traversal() -> SandboxError {
    SandboxError::PermissionDenied("Access denied: path traversal detected".to_owned())
}

pub(crate) fn escapes() -> SandboxError {
    SandboxError::PermissionDenied("Access denied: path escapes mounted directory".to_owned())
}

/// `path == prefix` or `path` starts with `prefix + "/"`.
pub fn is_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// Canonicalise a path that may not exist yet: the deepest existing ancestor is canonicalised
/// and the missing components appended. A component that exists but cannot be canonicalised
/// (a dangling or looping symlink) is an escape: following it could land anywhere.
///
/// This follows every symlink, including a swapped mount root: use it to compute spellings
/// (masking), never to decide access — that goes through [`crate::beneath`].
pub fn canonicalize_lenient(path: &Path) -> Result<PathBuf, SandboxError> {
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let mut cur = path;
    loop {
        match std::fs::canonicalize(cur) {
            Ok(mut c) => {
                for m in missing.iter().rev() {
                    c.push(m);
                }
                return Ok(c);
            }
            Err(_) if std::fs::symlink_metadata(cur).is_ok() => return Err(escapes()),
            Err(_) => {}
        }
        let name = match cur.components().next_back() {
            Some(Component::Normal(n)) => n,
            _ => return Ok(path.to_path_buf()),
        };
        missing.push(name);
        match cur.parent() {
            Some(p) if !p.as_os_str().is_empty() => cur = p,
            _ => return Ok(path.to_path_buf()),
        }
    }
}

/// Which characters may follow a matched prefix for it to count as a whole path segment.
#[derive(Clone, Copy, Debug)]
enum Boundary {
    /// Shell commands: `/`, end, whitespace, quotes, backtick or `; & | < > ( )`.
    Shell,
    /// Text: `/`, end, or anything outside `[A-Za-z0-9_.-]` (so `,`, `:` still end a path).
    Text,
}

impl Boundary {
    fn allows_after(self, c: Option<char>) -> bool {
        match c {
            None | Some('/') => true,
            Some(c) => match self {
                Boundary::Shell => {
                    c.is_whitespace() || "\"'`;&|<>()".contains(c) || c == ':' || c == ','
                }
                Boundary::Text => !(c.is_alphanumeric() || "_.-".contains(c)),
            },
        }
    }
}

/// Whether `c` (the char before a match) lets a path start here: not part of a longer word or
/// path (`x/mnt/user-data` and `/a/mnt/user-data` are left alone).
fn allows_before(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => !(c.is_alphanumeric() || "_.-/\\".contains(c)),
    }
}

/// Prefix substitution with segment boundaries; longest `from` wins.
#[derive(Clone, Debug, Default)]
struct Rewriter {
    pairs: Vec<(String, String)>,
}

impl Rewriter {
    fn new(mut pairs: Vec<(String, String)>) -> Rewriter {
        pairs.retain(|(f, _)| !f.is_empty() && f != "/");
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs.dedup_by(|a, b| a.0 == b.0);
        Rewriter { pairs }
    }

    fn apply<'a>(&self, text: &'a str, boundary: Boundary) -> Cow<'a, str> {
        if self.pairs.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out: Option<String> = None;
        let mut copied = 0;
        let mut i = 0;
        let bytes = text.as_bytes();
        while i < bytes.len() {
            if bytes[i] != b'/' {
                i += 1;
                continue;
            }
            let before = text[..i].chars().next_back();
            if !allows_before(before) {
                i += 1;
                continue;
            }
            let rest = &text[i..];
            let hit = self.pairs.iter().find(|(from, _)| {
                rest.starts_with(from.as_str())
                    && boundary.allows_after(rest[from.len()..].chars().next())
            });
            match hit {
                Some((from, to)) => {
                    let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
                    o.push_str(&text[copied..i]);
                    o.push_str(to);
                    i += from.len();
                    copied = i;
                }
                None => i += 1,
            }
        }
        match out {
            Some(mut o) => {
                o.push_str(&text[copied..]);
                Cow::Owned(o)
            }
            None => Cow::Borrowed(text),
        }
    }
}

/// The mount table of one sandbox, with its text rewriters compiled once and each mount root
/// held as a [`RootDir`] (opened lazily, re-validated on each use).
#[derive(Clone, Debug, Default)]
pub struct Mapper {
    /// Sorted by container path length, longest first.
    mappings: Vec<PathMapping>,
    /// Canonical host root of each mapping at construction (same order): masking spellings and
    /// the read-only overlap test only.
    canon: Vec<PathBuf>,
    /// The root handle of each mapping (same order).
    roots: Vec<Arc<RootDir>>,
    to_host: Rewriter,
    to_virtual: Rewriter,
}

/// One root per mapping. A pinned mapping whose parent is another pinned mapping's root is
/// held under that root's handle (`…/user-data/outputs` under `…/user-data`), so swapping the
/// parent is caught too; other pinned roots are held no-follow under their parent's path.
fn build_roots(mappings: &[PathMapping]) -> Vec<Arc<RootDir>> {
    let mut order: Vec<usize> = (0..mappings.len()).collect();
    order.sort_by_key(|&i| mappings[i].host.as_os_str().len());
    let mut roots: Vec<Option<Arc<RootDir>>> = vec![None; mappings.len()];
    for i in order {
        let m = &mappings[i];
        let root = if !m.pinned {
            RootDir::ambient(&m.host, &m.container)
        } else {
            let parent = m.host.parent().and_then(|p| {
                mappings
                    .iter()
                    .zip(&roots)
                    .find(|(o, r)| o.pinned && r.is_some() && o.host == p)
                    .and_then(|(_, r)| r.clone())
            });
            match (parent, m.host.file_name()) {
                (Some(p), Some(name)) => RootDir::child(&p, name, &m.container),
                _ => RootDir::no_follow(&m.host, &m.container),
            }
        };
        roots[i] = Some(root);
    }
    roots
        .into_iter()
        .zip(mappings)
        .map(|(r, m)| r.unwrap_or_else(|| RootDir::ambient(&m.host, &m.container)))
        .collect()
}

fn host_str(p: &Path) -> String {
    p.to_string_lossy().trim_end_matches('/').to_owned()
}

impl Mapper {
    pub fn new(mut mappings: Vec<PathMapping>) -> Mapper {
        for m in &mut mappings {
            let trimmed = m.container.trim_end_matches('/');
            m.container = if trimmed.is_empty() {
                "/".to_owned()
            } else {
                trimmed.to_owned()
            };
        }
        mappings.sort_by_key(|m| std::cmp::Reverse(m.container.len()));
        let canon: Vec<PathBuf> = mappings
            .iter()
            .map(|m| canonicalize_lenient(&m.host).unwrap_or_else(|_| m.host.clone()))
            .collect();
        let to_host = Rewriter::new(
            mappings
                .iter()
                .map(|m| (m.container.clone(), host_str(&m.host)))
                .collect(),
        );
        let mut back = Vec::new();
        for (m, c) in mappings.iter().zip(&canon) {
            back.push((host_str(&m.host), m.container.clone()));
            back.push((host_str(c), m.container.clone()));
        }
        Mapper {
            to_virtual: Rewriter::new(back),
            roots: build_roots(&mappings),
            mappings,
            canon,
            to_host,
        }
    }

    pub fn mappings(&self) -> &[PathMapping] {
        &self.mappings
    }

    /// The root handle of mapping `index` (as returned by [`Mapper::find`]).
    pub fn root(&self, index: usize) -> &Arc<RootDir> {
        &self.roots[index]
    }

    /// The mapping whose container path is the longest segment-boundary prefix of `path`.
    pub fn find(&self, path: &str) -> Option<(usize, &PathMapping)> {
        self.mappings
            .iter()
            .enumerate()
            .find(|(_, m)| is_under(path, &m.container))
    }

    /// DeerFlow's forward resolution: the host path for `path`, or `path` unchanged when no
    /// mapping matches. Contained and canonicalised like [`Mapper::resolve`].
    pub fn resolve_forward(&self, path: &str) -> Result<String, SandboxError> {
        match self.find(path) {
            None => Ok(path.to_owned()),
            Some(_) => Ok(self.resolve(path)?.host.to_string_lossy().into_owned()),
        }
    }

    /// Locate a virtual path in the mount table: its mapping and the path below the mount root.
    /// Unmapped paths and `..` segments are refused; nothing is touched on disk.
    pub fn locate(&self, path: &str) -> Result<Located<'_>, SandboxError> {
        reject_traversal(path)?;
        let Some((index, mapping)) = self.find(path) else {
            return Err(SandboxError::PermissionDenied(format!(
                "Access denied: {path} is outside the sandbox's mounted directories"
            )));
        };
        let rest = path[mapping.container.len()..].trim_start_matches('/');
        Ok(Located {
            index,
            mapping,
            rel: PathBuf::from(rest),
        })
    }

    /// Resolve a virtual path to its canonical host path, through the mount root's handle.
    /// Unmapped paths, `..` segments, a root replaced by a symlink or a file, and symlinks
    /// leading out of the mount are refused. The returned path is informational (it can change
    /// as soon as it is returned): file operations go through [`Mapper::root`] instead.
    pub fn resolve(&self, path: &str) -> Result<Resolved, SandboxError> {
        let loc = self.locate(path)?;
        let root = self.roots[loc.index].open()?;
        let rel = root
            .canonical(&loc.rel, true)
            .map_err(|e| SandboxError::from_io(path, e))?;
        let host = root.canonical_root().join(rel);
        let read_only = loc.mapping.read_only || self.host_is_read_only(&host);
        Ok(Resolved { host, read_only })
    }

    /// Whether a read-only mount's root lies inside mapping `index`'s root, so a write there
    /// must check where its target really is.
    pub(crate) fn has_read_only_inside(&self, index: usize) -> bool {
        let root = &self.canon[index];
        self.mappings
            .iter()
            .zip(&self.canon)
            .enumerate()
            .any(|(j, (m, c))| j != index && m.read_only && c.starts_with(root))
    }

    /// Whether a canonical host path falls (longest host prefix) under a read-only mount —
    /// catches symlinks from a writable mount into a read-only one.
    pub(crate) fn host_is_read_only(&self, host: &Path) -> bool {
        self.mappings
            .iter()
            .zip(&self.canon)
            .filter(|(_, c)| host.starts_with(c))
            .max_by_key(|(_, c)| c.as_os_str().len())
            .is_some_and(|(m, _)| m.read_only)
    }

    /// Host → virtual for one path (longest host root first); unchanged when none matches.
    pub fn reverse(&self, host: &Path) -> String {
        let s = host.to_string_lossy();
        self.to_virtual.apply(&s, Boundary::Text).into_owned()
    }

    /// Container paths inside a shell command → host paths.
    pub fn rewrite_command<'a>(&self, command: &'a str) -> Cow<'a, str> {
        self.to_host.apply(command, Boundary::Shell)
    }

    /// Container paths inside file content → host paths (what `write_file` stores).
    pub fn rewrite_content<'a>(&self, content: &'a str) -> Cow<'a, str> {
        self.to_host.apply(content, Boundary::Text)
    }

    /// Host paths inside text → container paths (everything the model reads).
    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.to_virtual.apply(text, Boundary::Text)
    }
}

/// A standalone host → virtual masker over `(host, virtual)` pairs (raw and canonical
/// spellings are both added).
#[derive(Clone, Debug, Default)]
pub struct Masker(Rewriter);

impl Masker {
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a Path, &'a str)>) -> Masker {
        let mut v = Vec::new();
        for (host, virt) in pairs {
            v.push((host_str(host), virt.to_owned()));
            if let Ok(c) = canonicalize_lenient(host) {
                v.push((host_str(&c), virt.to_owned()));
            }
        }
        Masker(Rewriter::new(v))
    }

    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.0.apply(text, Boundary::Text)
    }
}

/// A virtual → host rewriter for shell commands over `(virtual, host)` pairs.
#[derive(Clone, Debug, Default)]
pub struct CommandRewriter(Rewriter);

impl CommandRewriter {
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a Path)>) -> CommandRewriter {
        CommandRewriter(Rewriter::new(
            pairs
                .into_iter()
                .map(|(v, h)| (v.to_owned(), host_str(h)))
                .collect(),
        ))
    }

    /// Uses text boundaries (`:` and `,` end a path too), as DeerFlow's user-data rewrite does.
    pub fn rewrite<'a>(&self, command: &'a str) -> Cow<'a, str> {
        self.0.apply(command, Boundary::Text)
    }
}

#[cfg(test)]
#[path = "mapping_tests.rs"]
mod tests;
