//! The sandbox's error type. Variants mirror the exception families DeerFlow's tools tell apart,
//! so each tool can word its `Error: …` line the way spec 50 quotes it.

use std::io;

/// A sandbox operation failed. Every path inside is a **virtual** path: host paths never reach
/// an error message.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Path or command validation refused the request (DeerFlow's `PermissionError`); the text
    /// is the reason, e.g. `Access denied: path traversal detected`.
    #[error("{0}")]
    PermissionDenied(String),
    /// The path does not exist.
    #[error("File not found: {0}")]
    NotFound(String),
    /// A file operation named a directory.
    #[error("Path is a directory, not a file: {0}")]
    IsADirectory(String),
    /// A directory operation named something else.
    #[error("Path is not a directory: {0}")]
    NotADirectory(String),
    /// A write into a read-only mount.
    #[error("Read-only file system: {0}")]
    ReadOnly(String),
    /// The file is not UTF-8 text.
    #[error("cannot read '{0}' as text")]
    NotText(String),
    /// The file is larger than the whole-file read limit.
    #[error("File is too large to read at once: {path} ({size} bytes; limit {limit} bytes)")]
    TooLarge { path: String, size: u64, limit: u64 },
    /// `grep` got a pattern the regex engine rejects.
    #[error("Invalid regex pattern: {0}")]
    InvalidRegex(String),
    /// An injected environment variable name is not `^[A-Za-z_][A-Za-z0-9_]*$`.
    #[error("Invalid environment variable name: {0:?}")]
    InvalidEnvKey(String),
    /// Sandbox runtime problem (DeerFlow's `SandboxError` family): shown to the model verbatim.
    #[error("{0}")]
    Runtime(String),
    /// `sandbox.confine: required` and Landlock cannot be enforced; the command never ran.
    #[error("Landlock confinement is required (sandbox.confine: required) but unavailable: {0}. The command was not run.")]
    ConfinementRequired(String),
    /// A thread or user id that is not `^[A-Za-z0-9_-]{{1,64}}$` / `^[A-Za-z0-9_-]+$`.
    #[error("Invalid {kind} id: {id:?}")]
    InvalidId { kind: &'static str, id: String },
    /// Any other I/O failure on `path`.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl SandboxError {
    /// Classify an I/O error on `virtual_path` into the variant a tool reports. A resolution
    /// that left its root ([`crate::beneath::is_escape`]) is `Access denied: path escapes
    /// mounted directory`.
    pub fn from_io(virtual_path: &str, e: io::Error) -> SandboxError {
        if crate::beneath::is_escape(&e) {
            return crate::mapping::escapes();
        }
        let path = virtual_path.to_owned();
        match e.kind() {
            io::ErrorKind::NotFound => SandboxError::NotFound(path),
            io::ErrorKind::PermissionDenied => {
                SandboxError::PermissionDenied(format!("Permission denied: {path}"))
            }
            io::ErrorKind::IsADirectory => SandboxError::IsADirectory(path),
            io::ErrorKind::NotADirectory => SandboxError::NotADirectory(path),
            io::ErrorKind::ReadOnlyFilesystem => SandboxError::ReadOnly(path),
            io::ErrorKind::InvalidData => SandboxError::NotText(path),
            _ => SandboxError::Io { path, source: e },
        }
    }

    /// The exception-family name DeerFlow puts in `"{Type}: {msg}"` error details.
    pub fn kind_name(&self) -> &'static str {
        match self {
            SandboxError::PermissionDenied(_) => "PermissionError",
            SandboxError::NotFound(_) => "FileNotFoundError",
            SandboxError::IsADirectory(_) => "IsADirectoryError",
            SandboxError::NotADirectory(_) => "NotADirectoryError",
            SandboxError::ReadOnly(_) => "OSError",
            SandboxError::NotText(_) => "UnicodeDecodeError",
            SandboxError::TooLarge { .. } => "OSError",
            SandboxError::InvalidRegex(_) => "ValueError",
            SandboxError::InvalidEnvKey(_) => "ValueError",
            SandboxError::Runtime(_) => "SandboxError",
            SandboxError::ConfinementRequired(_) => "SandboxError",
            SandboxError::InvalidId { .. } => "ValueError",
            SandboxError::Io { .. } => "OSError",
        }
    }
}
