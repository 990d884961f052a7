//! Directory listing, glob and grep over host folders (spec 50 §3.5, §3.6), built on the
//! `ignore`, `globset` and `grep` crates. Callers map the host paths back to virtual ones.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{sinks, BinaryDetection, SearcherBuilder};

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

/// A listed entry: canonical host path and whether it is a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub is_dir: bool,
}

/// List `root` to `max_depth` levels (1 = children). Ignored names are skipped; symlinks are
/// listed as their canonical target only when it stays inside `root` and are never followed.
/// A missing or non-directory root yields nothing.
pub fn list_dir(root: &Path, max_depth: usize) -> Vec<Entry> {
    let mut out = Vec::new();
    let Ok(root) = root.canonicalize() else {
        return out;
    };
    if !root.is_dir() {
        return out;
    }
    walk_list(&root, &root, 1, max_depth.max(1), &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup();
    out
}

fn walk_list(root: &Path, dir: &Path, depth: usize, max_depth: usize, out: &mut Vec<Entry>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        if is_ignored_name(&name.to_string_lossy()) {
            continue;
        }
        let p = e.path();
        let Ok(ft) = e.file_type() else { continue };
        let Ok(canon) = p.canonicalize() else {
            continue;
        };
        if !canon.starts_with(root) {
            continue;
        }
        let is_dir = canon.is_dir();
        out.push(Entry {
            path: canon,
            is_dir,
        });
        if ft.is_dir() && !ft.is_symlink() && depth < max_depth {
            walk_list(root, &p, depth + 1, max_depth, out);
        }
    }
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

fn walker(root: &Path) -> ignore::Walk {
    ignore::WalkBuilder::new(root)
        .standard_filters(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| e.depth() == 0 || !is_ignored_name(&e.file_name().to_string_lossy()))
        .build()
}

fn rel_of(root: &Path, p: &Path) -> Option<String> {
    let rel = p.strip_prefix(root).ok()?;
    let s = rel.to_string_lossy().replace('\\', "/");
    (!s.is_empty()).then_some(s)
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
    let matcher = PathGlob::new(pattern)?;
    let mut out = Vec::new();
    for e in walker(root).flatten() {
        let Some(ft) = e.file_type() else { continue };
        if ft.is_dir() && !include_dirs {
            continue;
        }
        let Some(rel) = rel_of(root, e.path()) else {
            continue;
        };
        if matcher.is_match(&rel) {
            if out.len() >= max_results {
                return Ok((out, true));
            }
            out.push(e.path().to_path_buf());
        }
    }
    Ok((out, false))
}

/// A grep hit on a host file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMatch {
    pub path: PathBuf,
    pub line_number: u64,
    pub line: String,
}

fn is_binary(path: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return true;
    };
    let mut buf = [0u8; 8192];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
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

/// Search `root` (a file or a directory).
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
    let canon_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());

    let candidates: Vec<PathBuf> = if meta.is_file() {
        vec![root.to_path_buf()]
    } else {
        walker(root)
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .filter(|e| match (&filter, rel_of(root, e.path())) {
                (Some(f), Some(rel)) => f.is_match(&rel),
                (Some(_), None) => false,
                (None, _) => true,
            })
            .filter(|e| {
                e.path()
                    .canonicalize()
                    .is_ok_and(|c| c.starts_with(&canon_root))
            })
            .map(|e| e.path().to_path_buf())
            .collect()
    };

    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::none())
        .build();
    let mut out: Vec<HostMatch> = Vec::new();
    let mut truncated = false;
    for path in candidates {
        if truncated {
            break;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.len() <= GREP_MAX_FILE_BYTES => {}
            _ => continue,
        }
        if is_binary(&path) {
            continue;
        }
        let _ = searcher.search_path(
            &matcher,
            &path,
            sinks::Lossy(|lnum, line| {
                let line = line.trim_end_matches(['\n', '\r']);
                if line.chars().count() > GREP_MAX_LINE_CHARS {
                    return Ok(true);
                }
                if out.len() >= max_results {
                    truncated = true;
                    return Ok(false);
                }
                out.push(HostMatch {
                    path: path.clone(),
                    line_number: lnum,
                    line: summarize_line(line),
                });
                Ok(true)
            }),
        );
    }
    Ok((out, truncated))
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
    let meta = std::fs::metadata(path).map_err(|e| SandboxError::from_io(virtual_path, e))?;
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
    let bytes = std::fs::read(path).map_err(|e| SandboxError::from_io(virtual_path, e))?;
    if bytes.contains(&0) {
        return Err(SandboxError::NotText(virtual_path.to_owned()));
    }
    String::from_utf8(bytes).map_err(|_| SandboxError::NotText(virtual_path.to_owned()))
}

#[cfg(test)]
#[path = "fsops_tests.rs"]
mod tests;
