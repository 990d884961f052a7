//! The tool-layer gate for the local sandbox (spec 50 §3.7, §3.8): which virtual paths file
//! tools may touch, best-effort validation of bash commands, `/mnt/user-data` rewriting and
//! host-path masking of everything model-visible.
//!
//! This is defence in depth. The isolation boundary is the sandbox's path resolution (file
//! tools) and Landlock (bash, when confined).

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use antler_protocol::ThreadData;
use regex::Regex;

use crate::beneath::ThreadRoots;
use crate::error::SandboxError;
use crate::local::validate_mounts;
use crate::mapping::{is_under, reject_traversal, traversal, CommandRewriter, Masker, PathMapping};
use crate::paths::{ThreadDirs, ThreadPaths, VIRTUAL_USER_DATA};
use crate::settings::SandboxSettings;

/// System prefixes a bash command may name (executables and devices).
const SYSTEM_PREFIXES: &[&str] = &[
    "/bin/",
    "/usr/bin/",
    "/usr/sbin/",
    "/sbin/",
    "/opt/homebrew/bin/",
    "/dev/",
];
const CWD_COMMANDS: &[&str] = &["cd", "pushd"];
const WRAPPERS: &[&str] = &["command", "builtin"];
const PREFIX_KEYWORDS: &[&str] = &[
    "!", "{", "case", "do", "elif", "else", "for", "if", "select", "then", "time", "until",
    "while", "}", "done", "esac", "fi",
];
const ROOT_PATH_COMMANDS: &[&str] = &[
    "awk", "cat", "cp", "du", "find", "grep", "head", "less", "ln", "ls", "more", "mv", "rm",
    "sed", "tail", "tar",
];
const SEPARATORS: &[&str] = &[";", "&&", "||", "|", "|&", "&", "(", ")"];
const REDIRECTIONS: &[&str] = &[
    "<", ">", "<<", ">>", "<<<", "<>", ">&", "<&", "&>", "&>>", ">|",
];

fn re(cell: &'static OnceLock<Regex>, pat: &str) -> &'static Regex {
    cell.get_or_init(|| {
        Regex::new(pat).unwrap_or_else(|_| Regex::new("$^").unwrap_or_else(|_| unreachable!()))
    })
}

/// `fn name() -> &'static Regex`, each compiled once on first use.
macro_rules! lazy_regexes {
    ($($name:ident = $pat:expr;)*) => {$(
        fn $name() -> &'static Regex {
            static R: OnceLock<Regex> = OnceLock::new();
            re(&R, $pat)
        }
    )*};
}

lazy_regexes! {
    file_url_re = r"(?i)\bfile://\S+";
    url_re = r#"(?i)\b[a-z][a-z0-9+.-]*://[^\s"'`;&|<>()]+"#;
    scheme_re = r"(?i)^[a-z][a-z0-9+.-]*://";
    dotdot_re = r"(?:^|[/\\=])\.\.(?:$|[/\\])";
    subst_cd_re = r"\$\([^)]*\b(?:cd|pushd)\b";
    ident_re = r"^[A-Za-z_][A-Za-z0-9_]*$";
    brace_block_re = r"\{([^{}]*)\}";
}

fn perm(msg: impl Into<String>) -> SandboxError {
    SandboxError::PermissionDenied(msg.into())
}

/// Shell-style tokens (POSIX quoting; runs of `( ) ; < > | &` are their own tokens; newlines
/// become `;`). `None` on unbalanced quotes.
pub fn shell_tokens(command: &str) -> Option<Vec<String>> {
    let norm = command
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .replace('\n', " ; ");
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = norm.chars().peekable();
    let is_punct = |c: char| "();<>|&".contains(c);
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c if is_punct(c) => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                let mut p = String::from(c);
                while let Some(&n) = chars.peek() {
                    if is_punct(n) {
                        p.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(p);
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return None,
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return None,
                        },
                        Some(x) => cur.push(x),
                        None => return None,
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(x) => cur.push(x),
                    None => return None,
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Some(out)
}

fn is_non_file_url_token(token: &str) -> bool {
    let mut values = vec![token];
    if let Some((_, v)) = token.split_once('=') {
        values.push(v);
    }
    values
        .iter()
        .any(|v| scheme_re().is_match(v) && !v.to_ascii_lowercase().starts_with("file://"))
}

fn is_assignment(token: &str) -> bool {
    match token.split_once('=') {
        Some((name, _)) => ident_re().is_match(name),
        None => false,
    }
}

fn base_name(token: &str) -> &str {
    token.rsplit('/').next().unwrap_or(token)
}

/// Whether a `/…` fragment in a command is clearly text rather than a path: non-ASCII, or every
/// `{…}` block is a single identifier placeholder (and no `${`).
fn is_text_fragment(fragment: &str) -> bool {
    if !fragment.is_ascii() {
        return true;
    }
    if fragment.contains('{') || fragment.contains('}') {
        if fragment.contains("${") {
            return false;
        }
        let blocks: Vec<&str> = brace_block_re()
            .captures_iter(fragment)
            .filter_map(|c| c.get(1).map(|m| m.as_str()))
            .collect();
        if fragment.matches('{').count() != blocks.len()
            || fragment.matches('}').count() != blocks.len()
        {
            return false;
        }
        return blocks.iter().all(|b| ident_re().is_match(b));
    }
    false
}

/// The local sandbox's tool-layer policy for one thread.
#[derive(Clone, Debug)]
pub struct LocalPolicy {
    pub dirs: ThreadDirs,
    pub skills_container: String,
    pub mounts: Vec<PathMapping>,
    /// Extra absolute prefixes bash may name (e.g. paths served by an MCP filesystem server).
    pub extra_allowed: Vec<String>,
    masker: Masker,
    user_data_rewriter: CommandRewriter,
    /// The thread folders as directory handles (opened lazily, re-validated on use).
    roots: ThreadRoots,
}

impl LocalPolicy {
    /// `Thread data not available for local sandbox` when `thread_data` is missing.
    pub fn new(
        thread_data: Option<&ThreadData>,
        settings: &SandboxSettings,
    ) -> Result<LocalPolicy, SandboxError> {
        let dirs = thread_data
            .and_then(ThreadDirs::from_thread_data)
            .ok_or_else(|| {
                SandboxError::Runtime("Thread data not available for local sandbox".into())
            })?;
        let mappings = dirs.mappings();
        let mut mask_pairs: Vec<(PathBuf, String)> = mappings
            .iter()
            .map(|(v, h)| (h.clone(), v.clone()))
            .collect();
        if let Some(skills) = &settings.skills_host_path {
            mask_pairs.push((skills.clone(), settings.skills_container_path.clone()));
        }
        let masker = Masker::new(mask_pairs.iter().map(|(h, v)| (h.as_path(), v.as_str())));
        let user_data_rewriter =
            CommandRewriter::new(mappings.iter().map(|(v, h)| (v.as_str(), h.as_path())));
        Ok(LocalPolicy {
            skills_container: settings
                .skills_container_path
                .trim_end_matches('/')
                .to_owned(),
            mounts: validate_mounts(settings).0,
            extra_allowed: Vec::new(),
            roots: ThreadRoots::from_dirs(&dirs),
            dirs,
            masker,
            user_data_rewriter,
        })
    }

    fn is_skills_path(&self, path: &str) -> bool {
        is_under(path, &self.skills_container)
    }

    fn mount_for(&self, path: &str) -> Option<&PathMapping> {
        self.mounts
            .iter()
            .filter(|m| is_under(path, &m.container))
            .max_by_key(|m| m.container.len())
    }

    /// Whether `path` is served by a custom mount.
    pub fn is_custom_mount_path(&self, path: &str) -> bool {
        self.mount_for(path).is_some()
    }

    /// Spec 50 §3.7.1: which virtual paths a file tool may use.
    pub fn validate_tool_path(&self, path: &str, read_only: bool) -> Result<(), SandboxError> {
        reject_traversal(path)?;
        if self.is_skills_path(path) {
            if !read_only {
                return Err(perm(format!(
                    "Write access to skills path is not allowed: {path}"
                )));
            }
            return Ok(());
        }
        if path.starts_with(&format!("{VIRTUAL_USER_DATA}/")) {
            return Ok(());
        }
        if let Some(m) = self.mount_for(path) {
            if m.read_only && !read_only {
                return Err(perm(format!(
                    "Write access to read-only mount is not allowed: {path}"
                )));
            }
            return Ok(());
        }
        Err(perm(format!(
            "Only paths under {VIRTUAL_USER_DATA}/, {}/, or configured mount paths are allowed",
            self.skills_container
        )))
    }

    /// Spec 50 §3.7.2: the host path of a `/mnt/user-data/…` path, which must stay inside one of
    /// the three thread folders after following symlinks.
    ///
    /// Decided through directory handles ([`crate::beneath`]), never by canonicalising the
    /// roots: a folder replaced by a symlink or a file is `Access denied: … is not a directory`,
    /// and symlinks are followed only while they stay inside `user-data`. The common case (the
    /// path resolves inside the folder it names) costs one resolution beneath that folder.
    pub fn resolve_user_data(&self, path: &str) -> Result<PathBuf, SandboxError> {
        reject_traversal(path)?;
        let mut best: Option<(String, PathBuf)> = None;
        for (v, h) in self.dirs.mappings() {
            if is_under(path, &v) && best.as_ref().is_none_or(|(bv, _)| v.len() > bv.len()) {
                best = Some((v, h));
            }
        }
        let Some((v, h)) = best else {
            return Err(traversal());
        };
        let rest = Path::new(path[v.len()..].trim_start_matches('/'));
        let lexical = if rest.as_os_str().is_empty() {
            h.clone()
        } else {
            h.join(rest)
        };
        let folder = h
            .file_name()
            .and_then(|n| self.roots.folder(n))
            .filter(|_| v != VIRTUAL_USER_DATA);
        if let Some(root) = folder {
            match root.open() {
                Ok(b) => {
                    if b.metadata(rest).is_ok() {
                        return Ok(b.canonical_root().join(rest));
                    }
                }
                // Nothing there yet, so nothing to follow.
                Err(SandboxError::NotFound(_)) => return Ok(lexical),
                Err(e) => return Err(e),
            }
        }
        // Missing, or through a symlink leaving the folder: resolve beneath `user-data`, which
        // must land in one of the three folders.
        let (b, rel) = match (&self.roots.user_data, folder) {
            (Some(ud), _) => match ud.open() {
                Ok(b) => {
                    let rel = match h.file_name().filter(|_| v != VIRTUAL_USER_DATA) {
                        Some(name) => Path::new(name).join(rest),
                        None => rest.to_path_buf(),
                    };
                    (b, rel)
                }
                Err(SandboxError::NotFound(_)) => return Ok(lexical),
                Err(e) => return Err(e),
            },
            // The folders share no parent: each is its own boundary.
            (None, Some(root)) => (root.open()?, rest.to_path_buf()),
            (None, None) => return Err(traversal()),
        };
        let canon = b.canonical(&rel, true).map_err(|_| traversal())?;
        if self.roots.user_data.is_some() {
            let inside = match canon.components().next() {
                Some(Component::Normal(first)) => {
                    self.roots.folder(first).is_some_and(|r| r.is_usable())
                }
                _ => false,
            };
            if !inside {
                return Err(traversal());
            }
        }
        Ok(b.canonical_root().join(canon))
    }

    /// Open a `/mnt/user-data/…` file for reading through the folder handles, with the
    /// containment rule of [`LocalPolicy::resolve_user_data`] (for tools that read thread files
    /// without the sandbox, e.g. `view_image`).
    pub fn open_user_data(&self, path: &str) -> Result<std::fs::File, SandboxError> {
        let host = self.resolve_user_data(path)?;
        // Re-resolve the decided path beneath the root it lies in, so a swap after the check
        // cannot redirect the open.
        let roots = [
            self.roots.user_data.as_ref(),
            Some(&self.roots.workspace),
            Some(&self.roots.uploads),
            Some(&self.roots.outputs),
        ];
        for root in roots.into_iter().flatten().rev() {
            let Ok(b) = root.open() else { continue };
            if let Ok(rel) = host.strip_prefix(b.canonical_root()) {
                return b.open(rel).map_err(|e| SandboxError::from_io(path, e));
            }
        }
        Err(SandboxError::NotFound(path.to_owned()))
    }

    /// Read gate: path validation plus user-data containment.
    pub fn check_read(&self, path: &str) -> Result<(), SandboxError> {
        self.validate_tool_path(path, true)?;
        if is_under(path, VIRTUAL_USER_DATA) {
            self.resolve_user_data(path)?;
        }
        Ok(())
    }

    /// Write gate: path validation plus user-data containment.
    pub fn check_write(&self, path: &str) -> Result<(), SandboxError> {
        self.validate_tool_path(path, false)?;
        if is_under(path, VIRTUAL_USER_DATA) {
            self.resolve_user_data(path)?;
        }
        Ok(())
    }

    fn allowed_absolute(&self, path: &str, system: bool) -> Result<bool, SandboxError> {
        let virtual_ok = self
            .extra_allowed
            .iter()
            .any(|a| path.starts_with(a.as_str()) || path == a.trim_end_matches('/'))
            || is_under(path, VIRTUAL_USER_DATA)
            || self.is_skills_path(path)
            || self.is_custom_mount_path(path);
        if virtual_ok {
            reject_traversal(path)?;
            return Ok(true);
        }
        Ok(system
            && SYSTEM_PREFIXES
                .iter()
                .any(|p| path == p.trim_end_matches('/') || path.starts_with(p)))
    }

    fn check_cwd_target(&self, cmd: &str, target: Option<&str>) -> Result<(), SandboxError> {
        let unsafe_cd = |t: &str| {
            perm(format!(
                "Unsafe working directory change in command: {cmd}{t}. Use paths under {VIRTUAL_USER_DATA}"
            ))
        };
        match target {
            None | Some("-") => Err(unsafe_cd("")),
            Some(t) if t.starts_with('$') || t.starts_with('`') || t.starts_with('~') => {
                Err(unsafe_cd(&format!(" {t}")))
            }
            Some(t) if t.starts_with('/') => {
                reject_traversal(t)?;
                if self.allowed_absolute(t, false)? {
                    Ok(())
                } else {
                    Err(unsafe_cd(&format!(" {t}")))
                }
            }
            Some(_) => Ok(()),
        }
    }

    fn check_tokens(&self, command: &str) -> Result<(), SandboxError> {
        if subst_cd_re().is_match(command) {
            return Err(perm(format!(
                "Unsafe working directory change in command substitution. Use paths under {VIRTUAL_USER_DATA}"
            )));
        }
        let tokens = shell_tokens(command)
            .unwrap_or_else(|| command.split_whitespace().map(str::to_owned).collect());
        let is_sep = |t: &str| SEPARATORS.contains(&t);
        let is_redir = |t: &str| REDIRECTIONS.contains(&t);
        for t in &tokens {
            if is_sep(t) || is_redir(t) {
                continue;
            }
            if !is_non_file_url_token(t) && dotdot_re().is_match(t) {
                return Err(traversal());
            }
        }
        let next_target = |start: usize| -> (Option<&str>, usize) {
            let mut i = start;
            while i < tokens.len() {
                let t = tokens[i].as_str();
                if is_sep(t) {
                    return (None, i);
                }
                if is_redir(t) {
                    i += 2;
                    continue;
                }
                if t == "--" || (t.starts_with('-') && t != "-") {
                    i += 1;
                    continue;
                }
                return (Some(t), i + 1);
            }
            (None, i)
        };
        let root_args = |name: &str, start: usize| -> Result<(), SandboxError> {
            if !ROOT_PATH_COMMANDS.contains(&name) {
                return Ok(());
            }
            let mut i = start;
            while i < tokens.len() {
                let t = tokens[i].as_str();
                if is_sep(t) {
                    return Ok(());
                }
                if is_redir(t) {
                    i += 2;
                    continue;
                }
                if t == "/" {
                    return Err(perm(format!(
                        "Unsafe absolute paths in command: /. Use paths under {VIRTUAL_USER_DATA}"
                    )));
                }
                i += 1;
            }
            Ok(())
        };
        let mut at_start = true;
        let mut i = 0;
        while i < tokens.len() {
            let t = tokens[i].as_str();
            if is_sep(t) {
                at_start = true;
                i += 1;
                continue;
            }
            if is_redir(t) || !at_start {
                i += 1;
                continue;
            }
            if is_assignment(t) {
                i += 1;
                continue;
            }
            let name = base_name(t);
            if PREFIX_KEYWORDS.contains(&name) {
                i += 1;
                continue;
            }
            at_start = false;
            if WRAPPERS.contains(&name) && i + 1 < tokens.len() {
                let wrapped = base_name(&tokens[i + 1]);
                if CWD_COMMANDS.contains(&wrapped) {
                    let (target, next) = next_target(i + 2);
                    self.check_cwd_target(wrapped, target)?;
                    i = next;
                    continue;
                }
                root_args(wrapped, i + 2)?;
            }
            if !CWD_COMMANDS.contains(&name) {
                root_args(name, i + 1)?;
                i += 1;
                continue;
            }
            let (target, next) = next_target(i + 1);
            self.check_cwd_target(name, target)?;
            i = next;
        }
        Ok(())
    }

    /// Spec 50 §3.7.3: best-effort validation of a bash command before any rewriting.
    pub fn validate_bash_command(&self, command: &str) -> Result<(), SandboxError> {
        if let Some(m) = file_url_re().find(command) {
            return Err(perm(format!(
                "Unsafe file:// URL in command: {}. Use paths under {VIRTUAL_USER_DATA}",
                m.as_str()
            )));
        }
        self.check_tokens(command)?;
        let url_spans: Vec<(usize, usize)> = url_re()
            .find_iter(command)
            .filter(|m| !m.as_str().to_ascii_lowercase().starts_with("file://"))
            .map(|m| (m.start(), m.end()))
            .collect();
        let mut unsafe_paths: Vec<String> = Vec::new();
        let bytes = command.as_bytes();
        let is_delim = |c: char| c.is_whitespace() || "\"'`;&|<>()".contains(c);
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'/' {
                i += 1;
                continue;
            }
            let prev = command[..i].chars().next_back();
            let prev2 = command[..i].chars().rev().nth(1);
            let word = |c: char| c.is_alphanumeric() || c == '_';
            if prev.is_some_and(|c| c == ':' || word(c))
                || (prev == Some('/') && prev2 == Some(':'))
            {
                i += 1;
                continue;
            }
            let end = command[i + 1..]
                .find(is_delim)
                .map(|k| i + 1 + k)
                .unwrap_or(command.len());
            if end == i + 1 {
                i += 1;
                continue;
            }
            let frag = &command[i..end];
            let in_url = url_spans.iter().any(|(s, e)| *s <= i && i < *e);
            if !in_url && !is_text_fragment(frag) && !self.allowed_absolute(frag, true)? {
                unsafe_paths.push(frag.to_owned());
            }
            i = end;
        }
        if !unsafe_paths.is_empty() {
            unsafe_paths.sort();
            unsafe_paths.dedup();
            return Err(perm(format!(
                "Unsafe absolute paths in command: {}. Use paths under {VIRTUAL_USER_DATA}",
                unsafe_paths.join(", ")
            )));
        }
        Ok(())
    }

    /// Replace `/mnt/user-data[/…]` in a command with host paths (whole segments only).
    pub fn rewrite_user_data(&self, command: &str) -> String {
        self.user_data_rewriter.rewrite(command).into_owned()
    }

    /// `cd '<workspace>' && {command}`.
    pub fn with_cwd_prefix(&self, command: &str) -> String {
        let ws = self.dirs.workspace.to_string_lossy();
        format!("cd {} && {command}", shell_words::quote(&ws))
    }

    /// Host paths in model-visible text → virtual paths.
    pub fn mask(&self, text: &str) -> String {
        self.masker.mask(text).into_owned()
    }
}

/// Constructors from server-derived folders, kept apart from [`LocalPolicy::new`] on purpose.
impl LocalPolicy {
    /// The policy for a sandbox's own thread folders ([`crate::Sandbox::thread_paths`]). Tools
    /// build their gate with this so it never follows `thread_data` from state, which clients
    /// could once write. A home that is not valid UTF-8 yields folders that do not exist, so the
    /// gate then fails closed.
    pub fn for_paths(
        paths: &ThreadPaths,
        settings: &SandboxSettings,
    ) -> Result<LocalPolicy, SandboxError> {
        Self::new(Some(&paths.thread_data()), settings)
    }
}

#[cfg(test)]
#[path = "security_tests.rs"]
mod tests;
