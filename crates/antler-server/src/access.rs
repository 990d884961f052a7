//! Thread ownership and identity checks shared by every route: ids are validated (422), a
//! thread another user owns answers exactly like a missing one (404), and new threads get their
//! owner and (through the engine) an empty initial checkpoint so state and history work before
//! the first run.

use antler_store::ThreadRecord;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::{AppState, User};

/// `^[A-Za-z0-9_-]{1,64}$` or 422.
pub fn check_thread_id(id: &str) -> Result<(), ApiError> {
    if antler_sandbox::paths::is_valid_thread_id(id) {
        Ok(())
    } else {
        Err(ApiError::unprocessable(format!(
            "Invalid thread_id '{}': use 1-64 letters, digits, '-' or '_'",
            id.chars().take(80).collect::<String>()
        )))
    }
}

/// The caller's thread, or 404 (also for other users' threads).
pub async fn owned_thread(
    state: &AppState,
    user: &User,
    thread_id: &str,
) -> Result<ThreadRecord, ApiError> {
    check_thread_id(thread_id)?;
    match state.app.store.get_thread(thread_id).await? {
        Some(t) if user.owns(&t) => Ok(t),
        _ => Err(ApiError::thread_not_found(thread_id)),
    }
}

/// Whether the caller may touch the thread's files: it is theirs, or it does not exist yet
/// (uploads precede `POST /threads` in the UI).
pub async fn may_use_files(state: &AppState, user: &User, thread_id: &str) -> Result<(), ApiError> {
    check_thread_id(thread_id)?;
    match state.app.store.get_thread(thread_id).await? {
        Some(t) if !user.owns(&t) => Err(ApiError::thread_not_found(thread_id)),
        _ => Ok(()),
    }
}

/// The status clients see: `busy` while this process runs something on the thread.
pub fn live_status(state: &AppState, t: &ThreadRecord) -> String {
    if state.runs.is_busy(&t.thread_id) {
        ThreadRecord::BUSY.to_owned()
    } else {
        t.status.clone()
    }
}

/// Create a thread owned by `user` with an empty initial checkpoint (`step: -1`).
pub async fn create_thread(
    state: &AppState,
    user: &User,
    thread_id: &str,
    metadata: Map<String, Value>,
) -> Result<ThreadRecord, ApiError> {
    let mut record = ThreadRecord::new(thread_id);
    record.metadata = Value::Object(metadata);
    record.owner = Some(user.id.clone());
    Ok(state.app.create_thread(record).await?)
}
