//! What SkillActivation and SkillToolPolicy share (not a middleware): the live skill registry
//! they both resolve against, the `/skill-name` grammar, and the run-scoped keys through which
//! activation tells the policy which skill the user turned on.
//!
//! The two middlewares of one chain are built with the same random owner token
//! ([`owner_token`]); the policy honours a slash source only when it carries that token, so
//! nothing but this chain's activation can widen or narrow its tool set.

use std::path::PathBuf;
use std::sync::Arc;

use antler_runtime::RunKey;

/// One installed skill, as the live registry reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillRecord {
    pub name: String,
    /// `public`, `custom`, …
    pub category: String,
    /// `SKILL.md` as the agent sees it (`/mnt/skills/public/x/SKILL.md`).
    pub container_file: String,
    /// `SKILL.md` on the host.
    pub host_file: PathBuf,
    /// The host skills root `host_file` must stay beneath.
    pub root: PathBuf,
    pub enabled: bool,
    /// `allowed-tools` from the front matter; `None` = not declared.
    pub allowed_tools: Option<Vec<String>>,
    /// Custom skills the user may edit.
    pub editable: bool,
}

/// The skills installed now (re-read on every call: enabling or installing a skill applies
/// to the next model call).
pub trait SkillRegistry: Send + Sync {
    fn load(&self) -> Result<Vec<SkillRecord>, String>;
}

/// A fixed list (tests, embedding).
pub struct StaticSkills(pub Vec<SkillRecord>);

impl SkillRegistry for StaticSkills {
    fn load(&self) -> Result<Vec<SkillRecord>, String> {
        Ok(self.0.clone())
    }
}

/// Commands of the composer that own the leading slash; never skills.
pub const RESERVED_SLASH_NAMES: &[&str] = &[
    "bootstrap",
    "goal",
    "help",
    "memory",
    "models",
    "new",
    "status",
];

/// `/name rest…` → `(name, rest)` (rest left-trimmed), for `^/([a-z0-9]+(-[a-z0-9]+)*)(\s+|$)`
/// outside the reserved names.
pub fn parse_slash(text: &str) -> Option<(String, String)> {
    let rest = text.strip_prefix('/')?;
    let end = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let after = &rest[end..];
    let well_formed =
        !name.is_empty() && !name.starts_with('-') && !name.ends_with('-') && !name.contains("--");
    if !well_formed || !(after.is_empty() || after.starts_with(char::is_whitespace)) {
        return None;
    }
    if RESERVED_SLASH_NAMES.contains(&name) {
        return None;
    }
    Some((name.to_owned(), after.trim_start().to_owned()))
}

/// The skill a user activated with a slash command, published for the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct SlashSource {
    /// Container path of its `SKILL.md`.
    pub path: String,
    pub owner_token: Arc<str>,
}

/// Set by SkillActivation once a `/skill` is active; it stays for the rest of the run.
pub const SLASH_SOURCE: RunKey<SlashSource> = RunKey::new("__slash_skill_secret_source");
/// The user command already activated in this run (its message id, else a text hash).
pub const ACTIVATION_RUN: RunKey<String> = RunKey::new("__slash_skill_activation_run");

/// A fresh random token for one chain build.
pub fn owner_token() -> Arc<str> {
    Arc::from(uuid::Uuid::new_v4().simple().to_string())
}

/// POSIX-normalized container path (for matching registry entries by path).
pub fn normalize(path: &str) -> String {
    crate::posix::normalize_path(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_grammar() {
        assert_eq!(
            parse_slash("/deep-research  find x"),
            Some(("deep-research".into(), "find x".into()))
        );
        assert_eq!(parse_slash("/ppt"), Some(("ppt".into(), String::new())));
        assert_eq!(
            parse_slash("/ppt\nnext"),
            Some(("ppt".into(), "next".into()))
        );
        for bad in [
            "ppt", "/", "/Ppt", "/ppt!", "/-x", "/x-", "/a--b", "/help", "/new x", " /ppt",
        ] {
            assert_eq!(parse_slash(bad), None, "{bad}");
        }
    }
}
