//! Per-thread host folders and id validation (spec 50 §2.4).
//!
//! Layout under the data home (`$ANTLER_HOME`, default `./.antler`):
//! `threads/{thread_id}/user-data/{workspace,uploads,outputs}`, or
//! `users/{user_id}/threads/{thread_id}/user-data/…` when a user id is known. The agent sees
//! these as `/mnt/user-data/{workspace,uploads,outputs}`.

use std::path::{Path, PathBuf};

use antler_protocol::ThreadData;
use sha2::{Digest, Sha256};

use crate::beneath::ThreadRoots;
use crate::error::SandboxError;

/// The virtual root of a thread's folders.
pub const VIRTUAL_USER_DATA: &str = "/mnt/user-data";
pub const VIRTUAL_WORKSPACE: &str = "/mnt/user-data/workspace";
pub const VIRTUAL_UPLOADS: &str = "/mnt/user-data/uploads";
pub const VIRTUAL_OUTPUTS: &str = "/mnt/user-data/outputs";

/// `^[A-Za-z0-9_-]{1,64}$`.
pub fn is_valid_thread_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(is_id_byte)
}

/// `^[A-Za-z0-9_-]+$`.
pub fn is_valid_user_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(is_id_byte)
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Make an external id safe: unsafe characters become `-`, then `-` and the first 16 hex chars
/// of SHA-256(raw) are appended. Already-safe ids are returned unchanged.
pub fn safe_id(raw: &str) -> String {
    if is_valid_user_id(raw) {
        return raw.to_owned();
    }
    let cleaned: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let digest = Sha256::digest(raw.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{cleaned}-{hex}")
}

/// A thread's host folders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadPaths {
    pub thread_id: String,
    pub user_id: Option<String>,
    /// `{home}/[users/{uid}/]threads/{tid}`.
    pub thread_dir: PathBuf,
    /// `…/user-data`.
    pub user_data: PathBuf,
    pub workspace: PathBuf,
    pub uploads: PathBuf,
    pub outputs: PathBuf,
}

impl ThreadPaths {
    /// Paths of `thread_id` (and `user_id`, when given) under `home`. Validates both ids.
    pub fn new(home: &Path, thread_id: &str, user_id: Option<&str>) -> Result<Self, SandboxError> {
        if !is_valid_thread_id(thread_id) {
            return Err(SandboxError::InvalidId {
                kind: "thread",
                id: thread_id.to_owned(),
            });
        }
        let base = match user_id {
            Some(uid) if !is_valid_user_id(uid) => {
                return Err(SandboxError::InvalidId {
                    kind: "user",
                    id: uid.to_owned(),
                })
            }
            Some(uid) => home.join("users").join(uid),
            None => home.to_path_buf(),
        };
        let thread_dir = base.join("threads").join(thread_id);
        let user_data = thread_dir.join("user-data");
        Ok(ThreadPaths {
            thread_id: thread_id.to_owned(),
            user_id: user_id.map(str::to_owned),
            workspace: user_data.join("workspace"),
            uploads: user_data.join("uploads"),
            outputs: user_data.join("outputs"),
            user_data,
            thread_dir,
        })
    }

    /// Create the three folders (idempotent) without following symlinks; a folder replaced by
    /// a symlink or a file is left alone (see [`ThreadRoots::ensure`]).
    pub fn ensure_dirs(&self) -> std::io::Result<()> {
        ThreadRoots::new(self).ensure()
    }

    /// The `thread_data` state value (host paths).
    pub fn thread_data(&self) -> ThreadData {
        ThreadData {
            workspace_path: Some(self.workspace.to_string_lossy().into_owned()),
            uploads_path: Some(self.uploads.to_string_lossy().into_owned()),
            outputs_path: Some(self.outputs.to_string_lossy().into_owned()),
        }
    }
}

/// A thread's three folders as read back from `state.thread_data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadDirs {
    pub workspace: PathBuf,
    pub uploads: PathBuf,
    pub outputs: PathBuf,
}

impl ThreadDirs {
    /// `None` when any of the three paths is missing.
    pub fn from_thread_data(td: &ThreadData) -> Option<ThreadDirs> {
        Some(ThreadDirs {
            workspace: PathBuf::from(td.workspace_path.as_deref()?),
            uploads: PathBuf::from(td.uploads_path.as_deref()?),
            outputs: PathBuf::from(td.outputs_path.as_deref()?),
        })
    }

    /// The parent shared by the three folders (`…/user-data`), when they share one.
    pub fn user_data_root(&self) -> Option<PathBuf> {
        let p = self.workspace.parent()?;
        (self.uploads.parent() == Some(p) && self.outputs.parent() == Some(p))
            .then(|| p.to_path_buf())
    }

    /// `(virtual, host)` pairs, most specific first.
    pub fn mappings(&self) -> Vec<(String, PathBuf)> {
        let mut v = vec![
            (VIRTUAL_WORKSPACE.to_owned(), self.workspace.clone()),
            (VIRTUAL_UPLOADS.to_owned(), self.uploads.clone()),
            (VIRTUAL_OUTPUTS.to_owned(), self.outputs.clone()),
        ];
        if let Some(root) = self.user_data_root() {
            v.push((VIRTUAL_USER_DATA.to_owned(), root));
        }
        v
    }

    /// As [`ThreadPaths::ensure_dirs`].
    pub fn ensure_dirs(&self) -> std::io::Result<()> {
        ThreadRoots::from_dirs(self).ensure()
    }
}

impl From<&ThreadPaths> for ThreadDirs {
    fn from(p: &ThreadPaths) -> Self {
        ThreadDirs {
            workspace: p.workspace.clone(),
            uploads: p.uploads.clone(),
            outputs: p.outputs.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn ids_are_validated() {
        assert!(is_valid_thread_id("abc-DEF_123"));
        assert!(!is_valid_thread_id(""));
        assert!(!is_valid_thread_id(&"a".repeat(65)));
        assert!(!is_valid_thread_id("../x"));
        assert!(!is_valid_thread_id("a b"));
        assert!(ThreadPaths::new(Path::new("/h"), "../etc", None).is_err());
        assert!(ThreadPaths::new(Path::new("/h"), "t", Some("a/b")).is_err());
    }

    #[test]
    fn layout_with_and_without_user() {
        let p = ThreadPaths::new(Path::new("/h"), "t1", None).unwrap();
        assert_eq!(p.workspace, Path::new("/h/threads/t1/user-data/workspace"));
        let p = ThreadPaths::new(Path::new("/h"), "t1", Some("alice")).unwrap();
        assert_eq!(
            p.outputs,
            Path::new("/h/users/alice/threads/t1/user-data/outputs")
        );
        let dirs = ThreadDirs::from(&p);
        assert_eq!(
            dirs.user_data_root().unwrap(),
            Path::new("/h/users/alice/threads/t1/user-data")
        );
    }

    #[test]
    fn safe_ids_get_a_hash_suffix() {
        assert_eq!(safe_id("ok_id"), "ok_id");
        let s = safe_id("a@b.c");
        assert!(s.starts_with("a-b-c-"));
        assert_eq!(s.len(), "a-b-c-".len() + 16);
        assert!(is_valid_user_id(&s));
    }
}
