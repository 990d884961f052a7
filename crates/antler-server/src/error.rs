//! The one error type every handler returns, rendered as spec 70 §0.3 asks: a status code and
//! `{"detail": "<human readable string>"}` (auth errors carry `{"code", "message"}` instead).
//!
//! Internal failures are logged with their cause and answered with a generic 500 so store paths
//! and SQL never reach a client.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// `pub fn $name(detail) -> Self` for each plain status: the answer is that status with `detail`.
macro_rules! status_errors {
    ($($(#[$doc:meta])* $name:ident => $status:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(detail: impl Into<String>) -> Self {
                Self::new(StatusCode::$status, detail)
            }
        )*
    };
}

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// A string, or `{"code", "message"}` for auth errors.
    pub detail: Value,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: Value::String(detail.into()),
        }
    }

    status_errors! {
        /// 400: a bad input value.
        bad_request => BAD_REQUEST;
        /// 403.
        forbidden => FORBIDDEN;
        /// 404.
        not_found => NOT_FOUND;
        /// 409: a state conflict (busy thread, finished run, work in flight).
        conflict => CONFLICT;
        /// 413.
        too_large => PAYLOAD_TOO_LARGE;
        /// 422: malformed body, unsupported option or stream mode.
        unprocessable => UNPROCESSABLE_ENTITY;
        /// 501: the backend cannot do this.
        not_implemented => NOT_IMPLEMENTED;
    }

    /// 401 with DeerFlow's auth error shape.
    pub fn unauthorized(code: &str, message: &str) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            detail: json!({"code": code, "message": message}),
        }
    }

    /// 500. The cause is logged, never sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error answering a request");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error")
    }

    /// `Thread {id} not found`.
    pub fn thread_not_found(thread_id: &str) -> Self {
        Self::not_found(format!("Thread {thread_id} not found"))
    }

    /// `Run {id} not found`.
    pub fn run_not_found(run_id: &str) -> Self {
        Self::not_found(format!("Run {run_id} not found"))
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.detail {
            Value::String(s) => write!(f, "{}: {s}", self.status.as_u16()),
            other => write!(f, "{}: {other}", self.status.as_u16()),
        }
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"detail": self.detail});
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<antler_store::StoreError> for ApiError {
    fn from(e: antler_store::StoreError) -> Self {
        ApiError::internal(e)
    }
}

impl From<antler_agent::AgentError> for ApiError {
    fn from(e: antler_agent::AgentError) -> Self {
        ApiError::internal(e)
    }
}

impl From<antler_runtime::CheckpointError> for ApiError {
    fn from(e: antler_runtime::CheckpointError) -> Self {
        ApiError::internal(e)
    }
}
