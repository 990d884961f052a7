//! Directory listing, glob, grep and text reads (spec 50 §3.5, §3.6), built on the `globset`
//! and `grep` crates. Walks go through directory handles ([`crate::beneath`]): subdirectories
//! are opened no-follow from their parent's handle and files through their directory's handle,
//! so nothing a walk touches can lie outside its root. Callers map paths back to virtual ones.

use std::ffi::OsStr;
use std::io::{BufRead, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, FileType};
use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{sinks, BinaryDetection, SearcherBuilder};

use crate::beneath::Beneath;
use crate::error::SandboxError;

/// Names never listed or searched (DeerFlow's ignore list; `*` entries are globs).
const IGNORED_NAMES: &[&str] = &[
    ".git",
    ".svn",
    ".hg",
    ".bzr",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".eggs",
    "site-packages",
    "dist",
    "build",
    ".next",
    ".nuxt",
    ".output",
    ".turbo",
    "target",
    "out",
    ".idea",
    ".vscode",
    ".project",
    ".classpath",
    ".settings",
    ".DS_Store",
    "Thumbs.db",
    "desktop.ini",
    ".cache",
    "logs",
    ".coverage",
    "coverage",
    ".nyc_output",
    "htmlcov",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
];
const IGNORED_GLOBS: &[&str] = &[
    "*.egg-info",
    "*.swp",
    "*.swo",
    "*~",
    "*.lnk",
    "*.log",
    "*.tmp",
    "*.temp",
    ".upload-*.part",
    "*.bak",
    "*.cache",
];

fn ignored_globs() -> &'static GlobSet {
    static SET: OnceLock<GlobSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut b = GlobSetBuilder::new();
        for g in IGNORED_GLOBS {
            if let Ok(g) = Glob::new(g) {
                b.add(g);
            }
        }
        b.build().unwrap_or_else(|_| GlobSet::empty())
    })
}

/// Whether a file or directory name is on the ignore list.
pub fn is_ignored_name(name: &str) -> bool {
    IGNORED_NAMES.contains(&name) || ignored_globs().is_match(name)
}

/// Files larger than this are skipped by grep.
pub const GREP_MAX_FILE_BYTES: u64 = 1_000_000;
/// Lines longer than this are skipped by grep.
pub const GREP_MAX_LINE_CHARS: usize = 2_000;
/// Matched line text is cut to this many chars (`197 + "..."`).
pub const GREP_LINE_SUMMARY_CHARS: usize = 200;

/// A listed entry: a path (canonical; relative to the root for the `*_in` functions, a host
/// path for the path-based wrappers) and whether it is a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub is_dir: bool,
}

/// Deepest directory level a walk descends to (each level holds one open handle).
pub const WALK_MAX_DEPTH: usize = 256;

/// Walk `dir` depth-first, entries of each directory in file-name order, ignored names pruned,
/// symlinks reported but never followed (subdirectories are opened no-follow through their
/// parent's handle). `visit` gets the containing directory, the entry's path (`prefix` joined
/// with the name) and its type; `Break` stops the walk.
fn walk(
    dir: &Dir,
    prefix: &Path,
    depth: usize,
    max_depth: usize,
    visit: &mut dyn FnMut(&Dir, &Path, &OsStr, &FileType) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Ok(rd) = dir.entries() else {
        return ControlFlow::Continue(());
    };
    let mut entries: Vec<(std::ffi::OsString, FileType)> = rd
        .flatten()
        .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, ft) in entries {
        if is_ignored_name(&name.to_string_lossy()) {
            continue;
        }
        let rel = prefix.join(&name);
        visit(dir, &rel, &name, &ft)?;
        if ft.is_dir() && depth < max_depth {
            if let Ok(sub) = dir.open_dir_nofollow(&name) {
                walk(&sub, &rel, depth + 1, max_depth, visit)?;
            }
        }
    }
    ControlFlow::Continue(())
}

/// List `start` (a canonical path below `root`) to `max_depth` levels (1 = children). Ignored
/// names are skipped; symlinks are listed as their canonical target only when it stays inside
/// `start`, and are never followed. Paths are relative to `root`. A missing or non-directory
/// `start` yields nothing.
pub fn list_dir_in(root: &Beneath, start: &Path, max_depth: usize) -> Vec<Entry> {
    let mut out = Vec::new();
    let Ok(dir) = root.open_dir(start) else {
        return out;
    };
    let _ = walk(&dir, start, 1, max_depth.max(1), &mut |_, rel, _, ft| {
        if ft.is_symlink() {
            if let Ok(target) = root.canonical(rel, false) {
                if target.starts_with(start) {
                    let is_dir = root.metadata(&target).is_ok_and(|m| m.is_dir());
                    out.push(Entry {
                        path: target,
                        is_dir,
                    });
                }
            }
        } else {
            out.push(Entry {
                path: rel.to_path_buf(),
                is_dir: ft.is_dir(),
            });
        }
        ControlFlow::Continue(())
    });
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup();
    out
}

/// [`list_dir_in`] over a host directory; paths are canonical host paths.
pub fn list_dir(root: &Path, max_depth: usize) -> Vec<Entry> {
    let Ok(b) = Beneath::ambient(root) else {
        return Vec::new();
    };
    list_dir_in(&b, Path::new(""), max_depth)
        .into_iter()
        .map(|e| Entry {
            path: b.canonical_root().join(e.path),
            is_dir: e.is_dir,
        })
        .collect()
}

/// Right-anchored, per-segment glob matching: `*` never crosses `/`, and a pattern matches if
/// it matches any trailing run of segments (`*.py` and `**/*.py` match at any depth,
/// `src/*.py` matches `x/src/a.py`).
#[derive(Clone, Debug)]
pub struct PathGlob {
    matchers: Vec<GlobMatcher>,
}

impl PathGlob {
    pub fn new(pattern: &str) -> Result<PathGlob, SandboxError> {
        let mut pats = vec![pattern.to_owned()];
        if let Some(stripped) = pattern.strip_prefix("**/") {
            pats.push(stripped.to_owned());
        }
        let matchers = pats
            .iter()
            .map(|p| {
                GlobBuilder::new(p)
                    .literal_separator(true)
                    .build()
                    .map(|g| g.compile_matcher())
                    .map_err(|e| SandboxError::Runtime(format!("Invalid glob pattern: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PathGlob { matchers })
    }

    /// `rel` uses `/` separators.
    pub fn is_match(&self, rel: &str) -> bool {
        let mut suffix = rel;
        loop {
            if self.matchers.iter().any(|m| m.is_match(suffix)) {
                return true;
            }
            match suffix.find('/') {
                Some(i) => suffix = &suffix[i + 1..],
                None => return false,
            }
        }
    }
}

fn slash(rel: &Path) -> String {
    rel.to_string_lossy().replace('\\', "/")
}

/// Paths below the open directory `dir` matching `pattern`, relative to it; `true` when more
/// than `max_results` matched.
pub fn glob_in(
    dir: &Dir,
    pattern: &str,
    include_dirs: bool,
    max_results: usize,
) -> Result<(Vec<PathBuf>, bool), SandboxError> {
    let matcher = PathGlob::new(pattern)?;
    let mut out = Vec::new();
    let mut truncated = false;
    let _ = walk(
        dir,
        Path::new(""),
        1,
        WALK_MAX_DEPTH,
        &mut |_, rel, _, ft| {
            if ft.is_dir() && !include_dirs {
                return ControlFlow::Continue(());
            }
            if matcher.is_match(&slash(rel)) {
                if out.len() >= max_results {
                    truncated = true;
                    return ControlFlow::Break(());
                }
                out.push(rel.to_path_buf());
            }
            ControlFlow::Continue(())
        },
    );
    Ok((out, truncated))
}

/// Paths under directory `root` matching `pattern`; `true` when more than `max_results`
/// matched. `root` must exist and be a directory (`virtual_root` names it in errors).
pub fn glob(
    root: &Path,
    virtual_root: &str,
    pattern: &str,
    include_dirs: bool,
    max_results: usize,
) -> Result<(Vec<PathBuf>, bool), SandboxError> {
    let meta = std::fs::metadata(root).map_err(|e| SandboxError::from_io(virtual_root, e))?;
    if !meta.is_dir() {
        return Err(SandboxError::NotADirectory(virtual_root.to_owned()));
    }
    let b = Beneath::ambient(root).map_err(|e| SandboxError::from_io(virtual_root, e))?;
    let (found, truncated) = glob_in(b.dir(), pattern, include_dirs, max_results)?;
    Ok((found.into_iter().map(|r| root.join(r)).collect(), truncated))
}

/// A grep hit: the file's path (relative to the root for [`grep_in`], a host path for
/// [`grep`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMatch {
    pub path: PathBuf,
    pub line_number: u64,
    pub line: String,
}

/// NUL in the first 8 KiB (read without moving the file offset), or unreadable.
fn is_binary(f: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 8192];
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return true,
        }
    }
    buf[..n].contains(&0)
}

/// Cut a line to [`GREP_LINE_SUMMARY_CHARS`].
pub fn summarize_line(line: &str) -> String {
    if line.chars().count() <= GREP_LINE_SUMMARY_CHARS {
        return line.to_owned();
    }
    let head: String = line.chars().take(GREP_LINE_SUMMARY_CHARS - 3).collect();
    format!("{head}...")
}

/// A compiled grep request.
struct Grep<'a> {
    matcher: grep_regex::RegexMatcher,
    searcher: grep_searcher::Searcher,
    max_results: usize,
    out: &'a mut Vec<HostMatch>,
    truncated: bool,
}

impl Grep<'_> {
    /// Search one open file (skipped when too large or binary).
    fn file(&mut self, f: &std::fs::File, path: &Path) {
        match f.metadata() {
            Ok(m) if m.is_file() && m.len() <= GREP_MAX_FILE_BYTES => {}
            _ => return,
        }
        if is_binary(f) {
            return;
        }
        let (out, max, truncated) = (&mut *self.out, self.max_results, &mut self.truncated);
        let _ = self.searcher.search_file(
            &self.matcher,
            f,
            sinks::Lossy(|lnum, line| {
                let line = line.trim_end_matches(['\n', '\r']);
                if line.chars().count() > GREP_MAX_LINE_CHARS {
                    return Ok(true);
                }
                if out.len() >= max {
                    *truncated = true;
                    return Ok(false);
                }
                out.push(HostMatch {
                    path: path.to_path_buf(),
                    line_number: lnum,
                    line: summarize_line(line),
                });
                Ok(true)
            }),
        );
    }
}

/// Search `start` (a file or a directory below `root`); hit paths are relative to `root`. In a
/// directory, symlinks are skipped and files are opened through their directory's handle.
#[allow(clippy::too_many_arguments)]
pub fn grep_in(
    root: &Beneath,
    start: &Path,
    virtual_root: &str,
    pattern: &str,
    glob: Option<&str>,
    literal: bool,
    case_sensitive: bool,
    max_results: usize,
) -> Result<(Vec<HostMatch>, bool), SandboxError> {
    let meta = root
        .metadata(start)
        .map_err(|e| SandboxError::from_io(virtual_root, e))?;
    let pat = if literal {
        regex::escape(pattern)
    } else {
        pattern.to_owned()
    };
    // Validate with the regex crate first for a readable message.
    regex::RegexBuilder::new(&pat)
        .case_insensitive(!case_sensitive)
        .build()
        .map_err(|e| SandboxError::InvalidRegex(first_line(&e.to_string())))?;
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(!case_sensitive)
        .build(&pat)
        .map_err(|e| SandboxError::InvalidRegex(first_line(&e.to_string())))?;
    let filter = glob.map(PathGlob::new).transpose()?;
    let mut out: Vec<HostMatch> = Vec::new();
    let mut g = Grep {
        matcher,
        searcher: SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::none())
            .build(),
        max_results,
        out: &mut out,
        truncated: false,
    };
    if !meta.is_dir() {
        let f = root
            .open(start)
            .map_err(|e| SandboxError::from_io(virtual_root, e))?;
        g.file(&f, start);
    } else {
        let dir = root
            .open_dir(start)
            .map_err(|e| SandboxError::from_io(virtual_root, e))?;
        let _ = walk(
            &dir,
            Path::new(""),
            1,
            WALK_MAX_DEPTH,
            &mut |parent, rel, name, ft| {
                if !ft.is_file() || filter.as_ref().is_some_and(|f| !f.is_match(&slash(rel))) {
                    return ControlFlow::Continue(());
                }
                if let Ok(f) = parent.open(name) {
                    g.file(&f.into_std(), &start.join(rel));
                }
                if g.truncated {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        );
    }
    let truncated = g.truncated;
    Ok((out, truncated))
}

/// [`grep_in`] over a host file or directory; hit paths are host paths.
#[allow(clippy::too_many_arguments)]
pub fn grep(
    root: &Path,
    virtual_root: &str,
    pattern: &str,
    glob: Option<&str>,
    literal: bool,
    case_sensitive: bool,
    max_results: usize,
) -> Result<(Vec<HostMatch>, bool), SandboxError> {
    let meta = std::fs::metadata(root).map_err(|e| SandboxError::from_io(virtual_root, e))?;
    let (base, start) = match (meta.is_dir(), root.parent(), root.file_name()) {
        (false, Some(parent), Some(name)) => (parent.to_path_buf(), PathBuf::from(name)),
        _ => (root.to_path_buf(), PathBuf::new()),
    };
    let b = Beneath::ambient(&base).map_err(|e| SandboxError::from_io(virtual_root, e))?;
    let (found, truncated) = grep_in(
        &b,
        &start,
        virtual_root,
        pattern,
        glob,
        literal,
        case_sensitive,
        max_results,
    )?;
    Ok((
        found
            .into_iter()
            .map(|m| HostMatch {
                path: base.join(m.path),
                ..m
            })
            .collect(),
        truncated,
    ))
}

fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Read lines `start..=end` (1-indexed; `None` end = EOF) of a UTF-8 file, each without its
/// line ending, joined with `\n`. Streams: only the requested lines are held.
pub fn read_lines(
    path: &Path,
    virtual_path: &str,
    start: u64,
    end: Option<u64>,
) -> Result<String, SandboxError> {
    let f = std::fs::File::open(path).map_err(|e| SandboxError::from_io(virtual_path, e))?;
    read_lines_from(f, virtual_path, start, end)
}

/// [`read_lines`] from an open file.
pub fn read_lines_from(
    f: std::fs::File,
    virtual_path: &str,
    start: u64,
    end: Option<u64>,
) -> Result<String, SandboxError> {
    let mut r = std::io::BufReader::new(f);
    let mut buf = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        let k = r
            .read_until(b'\n', &mut buf)
            .map_err(|e| SandboxError::from_io(virtual_path, e))?;
        if k == 0 {
            break;
        }
        n += 1;
        if n < start {
            // Still check encoding: a binary file must not pass as text because of the range.
            if std::str::from_utf8(&buf).is_err() || buf.contains(&0) {
                return Err(SandboxError::NotText(virtual_path.to_owned()));
            }
            continue;
        }
        if end.is_some_and(|e| n > e) {
            break;
        }
        let s = std::str::from_utf8(&buf)
            .map_err(|_| SandboxError::NotText(virtual_path.to_owned()))?;
        if s.contains('\0') {
            return Err(SandboxError::NotText(virtual_path.to_owned()));
        }
        lines.push(s.trim_end_matches(['\n', '\r']).to_owned());
    }
    Ok(lines.join("\n"))
}

/// Read a whole UTF-8 text file of at most `limit` bytes.
pub fn read_text(path: &Path, virtual_path: &str, limit: u64) -> Result<String, SandboxError> {
    let f = std::fs::File::open(path).map_err(|e| SandboxError::from_io(virtual_path, e))?;
    read_text_from(f, virtual_path, limit)
}

/// [`read_text`] from an open file.
pub fn read_text_from(
    mut f: std::fs::File,
    virtual_path: &str,
    limit: u64,
) -> Result<String, SandboxError> {
    let meta = f
        .metadata()
        .map_err(|e| SandboxError::from_io(virtual_path, e))?;
    if meta.is_dir() {
        return Err(SandboxError::IsADirectory(virtual_path.to_owned()));
    }
    if limit > 0 && meta.len() > limit {
        return Err(SandboxError::TooLarge {
            path: virtual_path.to_owned(),
            size: meta.len(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // Never more than the limit, even if the file grows after the stat.
    let cap = if limit > 0 { limit } else { u64::MAX };
    (&mut f)
        .take(cap)
        .read_to_end(&mut bytes)
        .map_err(|e| SandboxError::from_io(virtual_path, e))?;
    if bytes.contains(&0) {
        return Err(SandboxError::NotText(virtual_path.to_owned()));
    }
    String::from_utf8(bytes).map_err(|_| SandboxError::NotText(virtual_path.to_owned()))
}

#[cfg(test)]
#[path = "fsops_tests.rs"]
mod tests;
