//! Request extractors whose rejections are spec 70 JSON errors instead of axum's text ones:
//! JSON bodies (an empty body is `null`; malformed JSON 422; over the limit 413), query strings
//! with SDK quirks (`1/0/true/false` booleans, empty values = absent, repeated keys), and the
//! authenticated [`User`] the auth layer attached.

use axum::body::Bytes;
use std::future::Future;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::{AppState, User};

/// A JSON request body as a [`Value`]; `Null` when the body is empty.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large("Request body too large")
            } else {
                ApiError::bad_request(format!("Could not read the request body: {e}"))
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::unprocessable(format!("Malformed JSON body: {e}")))
    }
}

impl JsonBody {
    /// Decode into `T` (`null` is read as `{}`); type errors are 422 naming the field.
    pub fn parse<T: DeserializeOwned>(self) -> Result<T, ApiError> {
        self.parse_as(StatusCode::UNPROCESSABLE_ENTITY)
    }

    /// [`JsonBody::parse`] answering `status` on a mismatch (thread search keeps its 400).
    pub fn parse_as<T: DeserializeOwned>(self, status: StatusCode) -> Result<T, ApiError> {
        let v = match self.0 {
            Value::Null => Value::Object(serde_json::Map::new()),
            v => v,
        };
        serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let detail = if path == "." {
                format!("Invalid request body: {inner}")
            } else {
                format!("Invalid request body: '{path}': {inner}")
            };
            ApiError::new(status, detail)
        })
    }
}

/// A JSON body decoded into a typed request (`antler_protocol::api`): an empty body is `{}`,
/// malformed JSON and a field of the wrong type are 422 with a string `detail` that names the
/// field (spec 70 §0.3), an oversized body 413.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        JsonBody::from_request(req, state).await?.parse().map(Body)
    }
}

/// The query string as ordered pairs.
#[derive(Clone, Debug, Default)]
pub struct QueryPairs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map(|q| QueryPairs(q.0))
            .map_err(|e| ApiError::unprocessable(format!("Malformed query string: {e}")))
    }
}

impl QueryPairs {
    /// First non-empty value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// Every non-empty value of `key`; JSON-array values (`["a","b"]`) are expanded.
    pub fn all(&self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.0 {
            if k != key || v.is_empty() {
                continue;
            }
            match serde_json::from_str::<Vec<String>>(v) {
                Ok(list) => out.extend(list),
                Err(_) => out.extend(v.split(',').map(|s| s.trim().to_owned())),
            }
        }
        out.retain(|s| !s.is_empty());
        out
    }

    /// `1/0/true/false` (any case); other values are 422.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" => Ok(Some(true)),
                "0" | "false" => Ok(Some(false)),
                _ => Err(ApiError::unprocessable(format!(
                    "Query parameter '{key}' must be 1, 0, true or false"
                ))),
            },
        }
    }

    /// An integer in `min..=max`, else 422.
    pub fn int(&self, key: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(ApiError::unprocessable(format!(
                    "Query parameter '{key}' must be an integer from {min} to {max}"
                ))),
            },
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for User {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<User>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("not_authenticated", "Authentication required"))
    }
}

/// What a thread or run handler extracts: the state, the caller (first, so a missing login
/// answers 401 before anything else) and the route's path ids `P` (a [`Path`], or `()` for routes
/// without ids).
pub struct Scope<P> {
    pub state: AppState,
    pub user: User,
    pub ids: P,
}

/// The path ids a [`Scope`] extracts.
pub trait ScopeIds: Sized {
    fn extract(
        parts: &mut Parts,
        state: &AppState,
    ) -> impl Future<Output = Result<Self, Response>> + Send;
}

impl ScopeIds for () {
    async fn extract(_parts: &mut Parts, _state: &AppState) -> Result<Self, Response> {
        Ok(())
    }
}

impl<T: DeserializeOwned + Send + 'static> ScopeIds for Path<T> {
    async fn extract(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)
    }
}

impl<P: ScopeIds> FromRequestParts<AppState> for Scope<P> {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let user = User::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let ids = P::extract(parts, state).await?;
        Ok(Scope {
            state: state.clone(),
            user,
            ids,
        })
    }
}

/// `/threads/{thread_id}/…`.
pub type ThreadScope = Scope<Path<String>>;
/// `/threads/{thread_id}/runs/{run_id}/…`.
pub type RunScope = Scope<Path<(String, String)>>;

impl ThreadScope {
    /// The state, the caller and the thread id.
    pub fn into_parts(self) -> (AppState, User, String) {
        (self.state, self.user, self.ids.0)
    }
}
