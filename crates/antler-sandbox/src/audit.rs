//! The bash audit classifier (spec 30 §SandboxAudit): every `bash` command is graded
//! **block**, **warn** or **pass** before it runs. Defence in depth and an audit trail, not the
//! isolation boundary.
//!
//! The rules are one table ([`RULES`]); each row names its verdict, where it applies (anywhere
//! in a command, or anchored at the start of one sub-command) and its matcher (a regex, or a
//! token check for shapes a regex reads badly, such as `rm` with split or quoted flags).
//!
//! Classification: the whole whitespace-normalised command is checked against the
//! "anywhere" block rules (patterns spanning statements: `| sh`, fork bombs); then the command is
//! split quote-, heredoc- and arithmetic-aware on `&& || ; |` and newlines, and every part is
//! checked against all block rules — raw, and again after shell-word parsing so quoting
//! (`r''m -rf "/"`) cannot hide a pattern — and then against the warn rules. The first block
//! wins; otherwise any warn; otherwise pass.
//!
//! When the command as written does not block, a small normalizer (`audit_normalize.rs`) undoes
//! cheap obfuscations — ANSI-C strings, literal `printf`/`echo` substitutions, simple variables,
//! quotes around command words — and the rewritten command is classified the same way. This is a tripwire for what a table can
//! recognise; a script written to a file and then run (`sh s.sh`) is beyond it, so the sandbox's
//! confinement, not this audit, is what bounds a command.

use std::sync::OnceLock;

use regex::bytes::{RegexSet, RegexSetBuilder};
use serde::Serialize;

/// The audit's decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Warn,
    Block,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Block => "block",
        }
    }
}

/// Longest command accepted.
pub const MAX_COMMAND_CHARS: usize = 10_000;

/// Input checks that run before classification. `Err(reason)` blocks with that reason.
pub fn validate_input(command: Option<&str>) -> Result<&str, &'static str> {
    let c = command.unwrap_or("");
    if c.trim().is_empty() {
        return Err("empty command");
    }
    if c.chars().count() > MAX_COMMAND_CHARS {
        return Err("command too long");
    }
    if c.contains('\0') {
        return Err("null byte detected");
    }
    Ok(c)
}

/// Where a rule applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Searched anywhere: in the whole command and in every sub-command.
    Anywhere,
    /// Only at the start of one sub-command (command position).
    CommandStart,
}

/// How a rule matches.
#[derive(Clone, Copy)]
pub enum Matcher {
    /// A regex (compiled once).
    Regex(&'static str),
    /// A check over the shell words of one sub-command.
    Words(fn(&[String]) -> bool),
}

/// One row of the rule table.
#[derive(Clone, Copy)]
pub struct Rule {
    pub id: &'static str,
    pub verdict: Verdict,
    pub scope: Scope,
    pub matcher: Matcher,
}

const fn block(id: &'static str, re: &'static str) -> Rule {
    Rule {
        id,
        verdict: Verdict::Block,
        scope: Scope::Anywhere,
        matcher: Matcher::Regex(re),
    }
}
const fn block_at_start(id: &'static str, re: &'static str) -> Rule {
    Rule {
        id,
        verdict: Verdict::Block,
        scope: Scope::CommandStart,
        matcher: Matcher::Regex(re),
    }
}
const fn block_words(id: &'static str, f: fn(&[String]) -> bool) -> Rule {
    Rule {
        id,
        verdict: Verdict::Block,
        scope: Scope::CommandStart,
        matcher: Matcher::Words(f),
    }
}
const fn warn(id: &'static str, re: &'static str) -> Rule {
    Rule {
        id,
        verdict: Verdict::Warn,
        scope: Scope::Anywhere,
        matcher: Matcher::Regex(re),
    }
}

// Building blocks (spelled out in each regex; `concat!` keeps them in one place).
macro_rules! risky_exe {
    () => {
        r"(?:curl|wget|bash|sh|python[\d.]*|ruby|perl|base64)\b"
    };
}
macro_rules! risky_sub {
    () => {
        concat!(r"(?:[$<]\(\s*|`\s*)", risky_exe!())
    };
}
macro_rules! shells {
    () => {
        r"(?:ba|da|k|z|a|c|tc|mk|fi)?sh\b"
    };
}
macro_rules! disk {
    () => {
        r"/dev/(?:(?:sd|hd|vd|xvd)[a-z]|nvme\d|mmcblk\d|md\d|dm-\d|mapper/|disk/)"
    };
}
macro_rules! interp {
    () => {
        r"\b(?:(?:ba|da|k|z)?sh|python[\d.]*|perl|ruby|node|php)"
    };
}
macro_rules! wrappers {
    () => {
        r"(?:(?:\S*/)?(?:sudo|doas|env|exec|command|nohup|time|busybox)\s+(?:-\S+\s+)*)*"
    };
}
macro_rules! cmd_prefix {
    () => {
        r"^(?:(?:env|command|builtin|exec|nohup|time|sudo|doas)\s+|\w+=\S*\s+){0,8}"
    };
}

/// The rule table. Order only matters for which rule id is reported.
pub static RULES: &[Rule] = &[
    // --- destruction ---
    block(
        "rm-root",
        // Also inside quoted code (`os.system("rm -rf /")`): fail closed.
        r#"rm\s+-[^\s]*[rR][^\s]*\s+(?:/\*?|~/?\*?|/home\b|/root\b)\s*(?:$|["'`)])"#,
    ),
    block_words("rm-recursive-root", rm_recursive_root),
    block_words("find-delete-root", find_delete_root),
    block(
        "cd-root-then-delete",
        r"\bcd\s+(?:/|~/?|\$HOME|\$\{HOME\})\s*(?:&&|;)\s*(?:sudo\s+)?rm\s+-\S*[rR]\S*\s+(?:\*|\.)(?:\s|$)",
    ),
    block(
        "rmtree-root",
        r#"\b(?:rmtree|remove_tree|rm_rf|rm_r|rmSync)\s*\(\s*(?:["'](?:/|/\*|~/?)["']|chr\s*\(\s*47\s*\)|os\.sep\b|(?:pathlib\.)?Path\s*\(\s*["']/["']\s*\)|Path\.home\s*\(|os\.path\.expanduser\s*\(\s*["']~/?["']|["']\\(?:x2[fF]|057|u002[fF])["'])"#,
    ),
    block_words(
        "recursive-chown-chmod-root",
        recursive_owner_or_mode_on_root,
    ),
    block("dd", concat!(r"\bdd\b[^;&|]*\bof=", disk!())),
    block("mkfs", r"mkfs"),
    block("disk-format", r"\b(?:mke2fs|wipefs|blkdiscard)\b"),
    block("raw-disk-write", concat!(r">\s*", disk!())),
    block("tee-disk", concat!(r"\btee\b[^;&|]*\s", disk!())),
    block(
        "copy-to-disk",
        concat!(r"\b(?:cp|mv|install)\b[^;&|]*\s", disk!(), r"\S*\s*$"),
    ),
    block("shred-device", r"\bshred\b.*\s/dev/"),
    // --- stopping the machine or every process ---
    block_words("power-state", power_state),
    block_words("kill-everything", kill_everything),
    // --- secrets ---
    block("shadow", r"cat\s+/etc/shadow"),
    block("proc-environ", r"/proc/[^/\s]+/environ"),
    // --- system and shell-startup writes ---
    block("write-etc", r">+\s*/etc/"),
    block("write-system-bin", r">+\s*(?:/usr/bin/|/bin/|/sbin/)"),
    block(
        "write-shell-rc",
        r">+\s*~/?\.(?:bashrc|profile|zshrc|bash_profile)",
    ),
    // --- executing fetched or decoded content ---
    block(
        "pipe-to-shell",
        concat!(r"\|\s*", wrappers!(), r"(?:\S*/)?", shells!()),
    ),
    block(
        "fetch-to-interpreter",
        concat!(
            r"\b(?:curl|wget)\b[^|]*\|\s*",
            wrappers!(),
            r"(?:\S*/)?(?:python[\d.]*|perl|ruby|node|php)\b"
        ),
    ),
    block(
        "fetch-to-variable-command",
        concat!(r"\b(?:curl|wget)\b[^|]*\|\s*", wrappers!(), r#"["']?\$"#),
    ),
    block(
        "source-stdin",
        concat!(
            r"(?:^|[\s;&|(])(?:source|\.|",
            shells!(),
            r")\s+(?:-\S+\s+)*(?:/dev/stdin|/dev/fd/\d+|/proc/self/fd/\d+)(?:\s|$)"
        ),
    ),
    block(
        "eval-substitution",
        concat!(r#"\b(?:eval|source)\s+["']?"#, risky_sub!()),
    ),
    block(
        "dot-source-substitution",
        r"(?:^|[\s;&|(])\.\s+<\(\s*(?:curl|wget)\b",
    ),
    block(
        "interpreter-code-substitution",
        concat!(
            interp!(),
            r#"\s+(?:-\w+\s+){0,4}-[cepr]\s+["']?"#,
            risky_sub!()
        ),
    ),
    block(
        "interpreter-herestring-substitution",
        concat!(interp!(), r#"\s+(?:-\w+\s+){0,4}<<<\s*["']?"#, risky_sub!()),
    ),
    block(
        "interpreter-process-substitution",
        concat!(interp!(), r#"\s+(?:-\S+\s+){0,4}["']?<\(\s*"#, risky_exe!()),
    ),
    block("base64-decode-pipe", r"base64\s+.*-d.*\|"),
    block(
        "base64-decode-executed",
        r"\b(?:eval|source|(?:ba|da|k|z)?sh|python[\d.]*|perl|ruby|node|php)\b[^;&|]*(?:\$\(|`|<\()[^)`]*\bbase64\b[^)`]*\s(?:-d|-D|--decode)\b",
    ),
    block(
        "b64decode-exec",
        r"\b(?:exec|eval|system|popen|run|call|check_output)\s*\(\s*(?:\w+\.)*b64decode\s*\(",
    ),
    block_at_start(
        "command-position-substitution",
        concat!(cmd_prefix!(), r#"["']?\$\(\s*"#, risky_exe!()),
    ),
    block_at_start(
        "command-position-backtick",
        concat!(cmd_prefix!(), r#"["']?`\s*"#, risky_exe!()),
    ),
    // --- hijacking and raw networking ---
    block("ld-preload", r"\b(?:LD_PRELOAD|LD_LIBRARY_PATH)\s*="),
    block("dev-tcp", r"/dev/(?:tcp|udp)/"),
    // --- fork bombs ---
    block("fork-bomb", r"\S+\s*\(\)\s*\{[^}]*\|\s*\S+\s*&"),
    block(
        "fork-bomb-function",
        r"\bfunction\s+\S+\s*(?:\(\))?\s*\{[^}]*\|\s*\S+\s*&",
    ),
    block("fork-bomb-loop", r"while\s+(?:true|:)\b.*&\s*done"),
    block("fork-bomb-perl", r"\bfork\s*while\s*fork\b"),
    block("fork-bomb-python", r"while\s+(?:True|1)\s*:\s*os\.fork\(\)"),
    // --- medium risk: runs, with a warning appended ---
    warn("chmod-777", r"chmod\s+(?:-\S+\s+)*0?777\b"),
    warn("chmod-world-rwx", r"chmod\s+(?:-\S+\s+)*(?:a|ugo)\+rwx\b"),
    warn("pip-install", r"\bpip[\d.]*\s+install\b"),
    warn("apt-install", r"\bapt(?:-get)?\s+install\b"),
    warn(
        "os-package-install",
        r"\b(?:yum|dnf|zypper)\s+install\b|\bapk\s+add\b",
    ),
    warn("sudo-su", r"\b(?:sudo|su)\b"),
    warn("path-change", r"\bPATH\s*="),
];

/// Targets of a recursive delete that wipe a system or home.
const DANGEROUS_TARGETS: &[&str] = &[
    "/",
    "/*",
    "~",
    "~/*",
    "$HOME",
    "${HOME}",
    "$HOME/*",
    "${HOME}/*",
    "/home",
    "/home/*",
    "/root",
    "/root/*",
    "/usr",
    "/etc",
    "/var",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/boot",
    "/opt",
    "/srv",
    "/sys",
    "/proc",
    "/dev",
    "/mnt",
    "/*/*",
];

fn normalize_target(t: &str) -> String {
    let mut s = t.to_owned();
    while s.contains("//") {
        s = s.replace("//", "/");
    }
    while let Some(stripped) = s.strip_suffix("/.") {
        s = if stripped.is_empty() {
            "/".to_owned()
        } else {
            stripped.to_owned()
        };
    }
    if s.len() > 1 {
        s = s.trim_end_matches('/').to_owned();
        if s.is_empty() {
            s = "/".to_owned();
        }
    }
    if s == "~/" {
        s = "~".to_owned();
    }
    s
}

/// Skip wrappers (`sudo`, `env`, `command`, `nohup`, …, with their flags) and assignments;
/// return the index of the real command word.
fn command_index(words: &[String]) -> Option<usize> {
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let base = w.rsplit('/').next().unwrap_or(w);
        let is_assign = w.split_once('=').is_some_and(|(n, _)| {
            !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assign || w.starts_with('-') && i > 0 {
            i += 1;
            continue;
        }
        if matches!(
            base,
            "sudo"
                | "doas"
                | "env"
                | "command"
                | "builtin"
                | "exec"
                | "nohup"
                | "time"
                | "nice"
                | "ionice"
                | "xargs"
                | "busybox"
        ) {
            i += 1;
            continue;
        }
        return Some(i);
    }
    None
}

/// The command's base name (wrappers skipped) and its arguments.
fn command_of(words: &[String]) -> Option<(&str, &[String])> {
    let i = command_index(words)?;
    let w = words[i].as_str();
    Some((w.rsplit('/').next().unwrap_or(w), &words[i + 1..]))
}

fn power_state(words: &[String]) -> bool {
    let Some((cmd, args)) = command_of(words) else {
        return false;
    };
    match cmd {
        "reboot" | "poweroff" | "halt" | "shutdown" | "kexec" => true,
        // Runlevels 0 (halt), 6 (reboot), 1/S (single user: every service stops).
        "init" | "telinit" => args
            .first()
            .is_some_and(|a| matches!(a.as_str(), "0" | "6" | "1" | "s" | "S")),
        "systemctl" | "loginctl" => args.iter().any(|a| {
            matches!(
                a.as_str(),
                "poweroff"
                    | "reboot"
                    | "halt"
                    | "kexec"
                    | "soft-reboot"
                    | "emergency"
                    | "rescue"
                    | "suspend"
                    | "hibernate"
                    | "hybrid-sleep"
            )
        }),
        _ => false,
    }
}

/// `kill -9 -1` (every process), `kill 1` (init), `pkill -9 -1`, `pkill .`, `killall5`.
fn kill_everything(words: &[String]) -> bool {
    let Some((cmd, args)) = command_of(words) else {
        return false;
    };
    if cmd == "killall5" {
        return true;
    }
    if !matches!(cmd, "kill" | "pkill" | "killall") {
        return false;
    }
    // The first option is the signal (`-9`, `-KILL`, `-s KILL`); after it, or after `--`,
    // every word is a target.
    let mut targets = Vec::new();
    let (mut signal_seen, mut options_done) = (false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if !options_done && a == "--" {
            options_done = true;
            continue;
        }
        if !options_done && !signal_seen && a.len() > 1 && a.starts_with('-') {
            signal_seen = true;
            if matches!(a.as_str(), "-s" | "-n" | "--signal") {
                it.next();
            }
            continue;
        }
        targets.push(a.as_str());
    }
    if cmd == "kill" {
        targets.iter().any(|t| matches!(*t, "-1" | "1"))
    } else {
        targets
            .iter()
            .any(|t| matches!(*t, "-1" | "." | ".*" | "^" | ""))
    }
}

/// `chown -R nobody /`, `chmod -R 000 /`: a recursive owner or mode change over a system or home.
fn recursive_owner_or_mode_on_root(words: &[String]) -> bool {
    let Some((cmd, args)) = command_of(words) else {
        return false;
    };
    if !matches!(cmd, "chown" | "chmod" | "chgrp" | "setfacl") {
        return false;
    }
    recursive_on_dangerous_target(args, &['R'])
}

fn rm_recursive_root(words: &[String]) -> bool {
    let Some(("rm", args)) = command_of(words) else {
        return false;
    };
    recursive_on_dangerous_target(args, &['r', 'R'])
}

/// Whether `args` ask for a recursive run (`--recursive`, or a group of short options holding
/// one of `flags`) on a dangerous target.
fn recursive_on_dangerous_target(args: &[String], flags: &[char]) -> bool {
    let recursive = args.iter().any(|a| {
        a == "--recursive" || (a.starts_with('-') && !a.starts_with("--") && a.contains(flags))
    });
    recursive
        && args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .any(|a| DANGEROUS_TARGETS.contains(&normalize_target(a).as_str()))
}

fn find_delete_root(words: &[String]) -> bool {
    let Some(("find", args)) = command_of(words) else {
        return false;
    };
    let root = args
        .iter()
        .take_while(|a| !a.starts_with('-'))
        .any(|a| DANGEROUS_TARGETS.contains(&normalize_target(a).as_str()));
    let deletes = args.iter().any(|a| a == "-delete")
        || args
            .windows(2)
            .any(|w| w[0] == "-exec" && w[1].rsplit('/').next() == Some("rm"));
    root && deletes
}

/// The rule table's regexes, compiled once into one [`RegexSet`] per verdict: a command is
/// scanned once per candidate text instead of once per rule (the audit runs on every bash call).
struct Compiled {
    /// Per rule (in table order): its index in its verdict's set, if it has a usable regex.
    slot: Vec<Option<usize>>,
    block: RegexSet,
    warn: RegexSet,
}

impl Compiled {
    fn set(&self, verdict: Verdict) -> &RegexSet {
        match verdict {
            Verdict::Block => &self.block,
            _ => &self.warn,
        }
    }
}

/// ASCII classes: shell syntax is ASCII, and the Unicode `\b`/`\s`/`\w` tables double the cost
/// of the first call, which compiles the whole table.
fn ascii_set(patterns: &[&str]) -> Result<RegexSet, regex::Error> {
    RegexSetBuilder::new(patterns).unicode(false).build()
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| {
        let mut slot = vec![None; RULES.len()];
        let mut sets = Vec::new();
        for verdict in [Verdict::Block, Verdict::Warn] {
            let rules: Vec<(usize, &str)> = RULES
                .iter()
                .enumerate()
                .filter(|(_, r)| r.verdict == verdict)
                .filter_map(|(i, r)| match r.matcher {
                    Matcher::Regex(p) => Some((i, p)),
                    Matcher::Words(_) => None,
                })
                .collect();
            let all: Vec<&str> = rules.iter().map(|&(_, p)| p).collect();
            // A pattern that does not compile disables its rule only (and is logged); each is
            // compiled alone only to find which one that is. The usual case compiles once.
            let (usable, set) = match ascii_set(&all) {
                Ok(set) => (rules, set),
                Err(_) => {
                    let usable: Vec<(usize, &str)> = rules
                        .into_iter()
                        .filter(|&(i, p)| match ascii_set(&[p]) {
                            Ok(_) => true,
                            Err(e) => {
                                tracing::error!(rule = RULES[i].id, error = %e, "invalid audit rule regex");
                                false
                            }
                        })
                        .collect();
                    let patterns: Vec<&str> = usable.iter().map(|&(_, p)| p).collect();
                    let set = ascii_set(&patterns).unwrap_or_else(|_| RegexSet::empty());
                    (usable, set)
                }
            };
            for (k, &(i, _)) in usable.iter().enumerate() {
                slot[i] = Some(k);
            }
            sets.push(set);
        }
        let warn = sets.pop().unwrap_or_else(RegexSet::empty);
        let block = sets.pop().unwrap_or_else(RegexSet::empty);
        Compiled { slot, block, warn }
    })
}

/// The result of classifying one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classification {
    pub verdict: Verdict,
    /// Id of the first rule that decided the verdict (`None` for pass).
    pub rule: Option<&'static str>,
}

fn find_rule(text: &str, verdict: Verdict, whole: bool) -> Option<&'static str> {
    let c = compiled();
    let set = c.set(verdict);
    // Most commands match no rule: the early-exit scan settles that without the overlapping
    // search (and its per-call match set) that `matches` runs.
    let hits = set
        .is_match(text.as_bytes())
        .then(|| set.matches(text.as_bytes()));
    // Split into shell words only when a word rule of this verdict is reached.
    let mut words: Option<Option<Vec<String>>> = None;
    let matched = |i: usize| c.slot[i].is_some_and(|s| hits.as_ref().is_some_and(|h| h.matched(s)));
    RULES
        .iter()
        .enumerate()
        .filter(|(_, r)| r.verdict == verdict)
        .find(|&(i, r)| match (r.scope, r.matcher) {
            (Scope::Anywhere, Matcher::Regex(_)) => matched(i),
            (Scope::CommandStart, Matcher::Regex(_)) => !whole && matched(i),
            (Scope::CommandStart, Matcher::Words(f)) => {
                !whole
                    && words
                        .get_or_insert_with(|| shell_words::split(text).ok())
                        .as_deref()
                        .is_some_and(f)
            }
            (Scope::Anywhere, Matcher::Words(_)) => false,
        })
        .map(|(_, r)| r.id)
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Grade a command (after [`validate_input`]): the command as written and, when the normalizer
/// changes it, the rewritten form; a block in either wins, then a warning in either.
pub fn classify(command: &str) -> Classification {
    let first = classify_text(command);
    if first.verdict == Verdict::Block {
        return first;
    }
    // Only rewritten when the command as written did not already block.
    let Some(rewritten) = normalize::rewrite(command) else {
        return first;
    };
    let second = classify_text(&rewritten);
    match (first.verdict, second.verdict) {
        (_, Verdict::Block) | (Verdict::Pass, Verdict::Warn) => second,
        _ => first,
    }
}

fn classify_text(command: &str) -> Classification {
    let normalized = collapse(command);
    if let Some(id) = find_rule(&normalized, Verdict::Block, true) {
        return Classification {
            verdict: Verdict::Block,
            rule: Some(id),
        };
    }
    let mut warned: Option<&'static str> = None;
    for part in split_compound(command, true) {
        let n = collapse(&part);
        let joined = shell_words::split(&part).ok().map(|w| w.join(" "));
        // The shell words joined again are mostly the collapsed text itself: scanned once then.
        let joined = joined.filter(|j| *j != n);
        for candidate in std::iter::once(&n).chain(joined.as_ref()) {
            if let Some(id) = find_rule(candidate, Verdict::Block, false) {
                return Classification {
                    verdict: Verdict::Block,
                    rule: Some(id),
                };
            }
        }
        if warned.is_none() {
            warned = find_rule(&n, Verdict::Warn, false);
        }
    }
    match warned {
        Some(id) => Classification {
            verdict: Verdict::Warn,
            rule: Some(id),
        },
        None => Classification {
            verdict: Verdict::Pass,
            rule: None,
        },
    }
}

/// A heredoc header at `s` (which starts with `<<`, not `<<<`): its delimiter and length.
fn heredoc_header(s: &str) -> Option<(String, usize)> {
    let rest = s.strip_prefix("<<")?;
    if rest.starts_with('<') {
        return None;
    }
    let mut i = 2;
    let mut r = rest;
    if let Some(x) = r.strip_prefix('-') {
        r = x;
        i += 1;
    }
    let ws = r.len() - r.trim_start_matches([' ', '\t']).len();
    r = &r[ws..];
    i += ws;
    let quoted = |q: char, r: &str| -> Option<(String, usize)> {
        let body = r.strip_prefix(q)?;
        let end = body.find([q, '\n'])?;
        (body[end..].starts_with(q)).then(|| (body[..end].to_owned(), end + 2))
    };
    if let Some((d, len)) = quoted('\'', r).or_else(|| quoted('"', r)) {
        return Some((d, i + len));
    }
    let (r, esc) = match r.strip_prefix('\\') {
        Some(x) => (x, 1),
        None => (r, 0),
    };
    let mut chars = r.char_indices();
    match chars.next() {
        Some((_, c)) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return None,
    }
    let end = r
        .char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '-')))
        .map(|(k, _)| k)
        .unwrap_or(r.len());
    Some((r[..end].to_owned(), i + esc + end))
}

/// Index just past the bodies of `delims`, starting at `pos` (the start of the body line).
fn consume_heredoc_bodies(s: &str, mut pos: usize, delims: &[String]) -> usize {
    for d in delims {
        loop {
            if pos >= s.len() {
                return s.len();
            }
            let Some(nl) = s[pos..].find('\n') else {
                return s.len();
            };
            let line = &s[pos..pos + nl];
            pos += nl + 1;
            if line.trim() == d {
                break;
            }
        }
    }
    pos
}

/// Split a compound command into sub-commands on unquoted `&&`, `||`, `;`, newlines (and `|`
/// when `split_pipes`). Heredoc bodies stay with their command; `<<` inside `((…))` is a shift;
/// an unclosed quote or trailing escape returns the whole command (fail closed).
pub fn split_compound(command: &str, split_pipes: bool) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut pending: Vec<String> = Vec::new();
    let (mut sq, mut dq, mut esc) = (false, false, false);
    let mut arith = 0usize;
    let mut i = 0;
    let push = |cur: &mut String, parts: &mut Vec<String>| {
        let p = cur.trim();
        if !p.is_empty() {
            parts.push(p.to_owned());
        }
        cur.clear();
    };
    while i < command.len() {
        let rest = &command[i..];
        let Some(c) = rest.chars().next() else { break };
        let w = c.len_utf8();
        if esc {
            cur.push(c);
            esc = false;
            i += w;
            continue;
        }
        if c == '\\' && !sq {
            cur.push(c);
            esc = true;
            i += w;
            continue;
        }
        if c == '\'' && !dq {
            sq = !sq;
            cur.push(c);
            i += w;
            continue;
        }
        if c == '"' && !sq {
            dq = !dq;
            cur.push(c);
            i += w;
            continue;
        }
        if !sq && !dq {
            if rest.starts_with("((") {
                arith += 1;
                cur.push_str("((");
                i += 2;
                continue;
            }
            if arith > 0 && rest.starts_with("))") {
                arith -= 1;
                cur.push_str("))");
                i += 2;
                continue;
            }
            if c == '<' && arith == 0 && !command[..i].ends_with('<') {
                if let Some((delim, len)) = heredoc_header(rest) {
                    pending.push(delim);
                    cur.push_str(&rest[..len]);
                    i += len;
                    continue;
                }
            }
            if c == '\n' {
                if !pending.is_empty() {
                    let end = consume_heredoc_bodies(command, i + 1, &pending);
                    pending.clear();
                    cur.push_str(&command[i..end]);
                    i = end;
                } else {
                    i += w;
                }
                push(&mut cur, &mut parts);
                continue;
            }
            if rest.starts_with("&&") || rest.starts_with("||") {
                push(&mut cur, &mut parts);
                i += 2;
                continue;
            }
            if (split_pipes && c == '|') || c == ';' {
                push(&mut cur, &mut parts);
                i += 1;
                continue;
            }
        }
        cur.push(c);
        i += w;
    }
    if sq || dq || esc {
        return vec![command.to_owned()];
    }
    push(&mut cur, &mut parts);
    if parts.is_empty() {
        vec![command.to_owned()]
    } else {
        parts
    }
}

/// One audit log record (`{timestamp, thread_id, command, verdict}` plus antler's `rule`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    pub timestamp: String,
    pub thread_id: String,
    pub command: String,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Input-check reason for a blocked command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The command as written to the audit log: oversized input is cut to 200 chars with a length
/// note.
pub fn audited_command(command: &str, truncate: bool) -> String {
    let n = command.chars().count();
    if truncate && n > 200 {
        let head: String = command.chars().take(200).collect();
        format!("{head}... ({n} chars)")
    } else {
        command.to_owned()
    }
}

#[path = "audit_normalize.rs"]
mod normalize;

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
