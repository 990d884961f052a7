//! `StoreError`: every failure names the database file and says what was being done, so a
//! read-only directory, a full disk or a foreign file reads as such instead of a bare SQLite code.

use std::path::{Path, PathBuf};

use antler_protocol::checkpoint::CheckpointError;

/// What kind of SQLite or file-system failure lies under a [`StoreError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The file or its directory is not writable (read-only file system, permissions).
    ReadOnly,
    /// No space left on the device, or the database reached its size limit.
    DiskFull,
    /// The file exists but is not an SQLite database.
    NotADatabase,
    /// The file could not be created or opened (missing or unwritable directory).
    CannotOpen,
    /// Another connection or process held the lock longer than the busy timeout.
    Busy,
    /// A uniqueness or foreign-key rule was broken (e.g. a checkpoint id reused).
    Constraint,
    /// The database file itself is damaged.
    Malformed,
    /// An operating-system I/O error.
    Io,
    /// Anything else.
    Other,
}

impl Failure {
    fn explain(self) -> &'static str {
        match self {
            Failure::ReadOnly => "the database or its directory is read-only",
            Failure::DiskFull => "the disk is full",
            Failure::NotADatabase => "the file is not an antler (SQLite) database",
            Failure::CannotOpen => "the file cannot be created or opened",
            Failure::Busy => "the database stayed locked by another writer",
            Failure::Constraint => "a uniqueness or reference rule was violated",
            Failure::Malformed => "the database file is damaged",
            Failure::Io => "an I/O error occurred",
            Failure::Other => "SQLite reported an error",
        }
    }
}

/// Errors of [`crate::SqliteStore`].
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, configured or migrated. Fatal for the process.
    #[error("cannot open database {}: {}: {cause}", path.display(), kind.explain())]
    Open {
        path: PathBuf,
        kind: Failure,
        cause: String,
    },
    /// The file was written by a newer antler. Fatal: this binary must not touch it.
    #[error(
        "database {} has schema version {found}, newer than the {known} this antler knows; \
         upgrade antler or point it at another database",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// A statement failed. `Busy` is transient; the others need an operator.
    #[error("database {}: cannot {op}: {}: {cause}", path.display(), kind.explain())]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        kind: Failure,
        cause: String,
    },
    /// A stored checkpoint does not decode. The caller may fall back to an earlier one
    /// ([`crate::SqliteStore::latest_good`]).
    #[error("checkpoint {checkpoint_id} of thread {thread_id} is corrupt: {what}: {cause}")]
    CorruptCheckpoint {
        thread_id: String,
        checkpoint_id: String,
        what: String,
        cause: String,
    },
    /// A stored thread or run row does not decode.
    #[error("corrupt row: {what}: {cause}")]
    Corrupt { what: String, cause: String },
    /// A checkpoint write names a parent that is not a checkpoint of its thread.
    #[error("unknown parent checkpoint {0}")]
    UnknownParent(String),
    /// The row to update does not exist.
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A value could not be encoded as JSON (or an ordinal is out of range).
    #[error("cannot encode {what}: {cause}")]
    Encode { what: String, cause: String },
    /// The writer thread has stopped (it panicked or the runtime is shutting down).
    #[error("database {}: the writer has stopped", path.display())]
    Closed { path: PathBuf },
}

impl StoreError {
    /// The underlying failure kind, when the error came from SQLite or the file system.
    pub fn failure(&self) -> Option<Failure> {
        match self {
            StoreError::Open { kind, .. } | StoreError::Sqlite { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    pub(crate) fn sqlite(path: &Path, op: &'static str, e: &rusqlite::Error) -> Self {
        StoreError::Sqlite {
            path: path.to_path_buf(),
            op,
            kind: classify(e),
            cause: e.to_string(),
        }
    }

    pub(crate) fn open(path: &Path, e: &rusqlite::Error) -> Self {
        StoreError::Open {
            path: path.to_path_buf(),
            kind: classify(e),
            cause: e.to_string(),
        }
    }

    pub(crate) fn encode(what: impl Into<String>, cause: impl ToString) -> Self {
        StoreError::Encode {
            what: what.into(),
            cause: cause.to_string(),
        }
    }
}

/// Classify a rusqlite error by its primary result code.
pub(crate) fn classify(e: &rusqlite::Error) -> Failure {
    use rusqlite::ffi::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => Failure::ReadOnly,
        Some(ErrorCode::DiskFull) => Failure::DiskFull,
        Some(ErrorCode::NotADatabase) => Failure::NotADatabase,
        Some(ErrorCode::CannotOpen) => Failure::CannotOpen,
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Failure::Busy,
        Some(ErrorCode::ConstraintViolation) => Failure::Constraint,
        Some(ErrorCode::DatabaseCorrupt) => Failure::Malformed,
        Some(ErrorCode::SystemIoFailure) => Failure::Io,
        _ => Failure::Other,
    }
}

/// Classify a file-system error met while preparing the database directory.
pub(crate) fn classify_io(e: &std::io::Error) -> Failure {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => Failure::ReadOnly,
        ErrorKind::StorageFull => Failure::DiskFull,
        ErrorKind::NotADirectory | ErrorKind::AlreadyExists => Failure::CannotOpen,
        _ => Failure::Io,
    }
}

impl From<StoreError> for CheckpointError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UnknownParent(id) => CheckpointError::UnknownParent(id),
            StoreError::CorruptCheckpoint { .. } => CheckpointError::Corrupt(e.to_string()),
            other => CheckpointError::Store(other.to_string()),
        }
    }
}
