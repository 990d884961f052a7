//! LLMErrorHandling (chain S8, wrap_model): provider failures become retries, a circuit breaker
//! and, in the end, a readable assistant message instead of a failed run (spec 30
//! §LLMErrorHandlingMiddleware).
//!
//! Sits right inside DanglingToolCall, so every retry sends the already repaired transcript, and
//! outside every lead-only model wrapper, so one-shot request injections are rebuilt on each
//! attempt (DESIGN §7). Per call:
//!
//! 1. The [`CircuitBreaker`] (process-wide, shared across runs through an `Arc`) may fast-fail
//!    with a fallback message without calling the model.
//! 2. Each attempt runs under the optional process-wide [`LlmCallLimiter`]; the permit is held
//!    for one attempt only, never during backoff.
//! 3. A failure is classified ([`classify`]); retriable ones are retried with decorrelated
//!    jitter or the provider's `Retry-After`, announcing each retry as an `llm_retry` custom
//!    event. Waiting observes the run's cancellation. No wait exceeds `max_retry_after`: a
//!    longer `Retry-After` ends the call as if its retries were exhausted.
//! 4. The final failure updates the breaker and becomes an AI message carrying the
//!    `deerflow_error_fallback` markers (spec 10 §1.6) so the run worker can mark the run
//!    `error` while the transcript stays well-formed.
//!
//! Control flow never reaches this wrapper as an error (the runtime keeps it on the `Ok` side),
//! so nothing here can swallow it; a call abandoned mid-probe (cancellation) still frees the
//! half-open probe through a drop guard.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use antler_models::ModelError;
use antler_protocol::{AiMessage, Content, Object};
use antler_runtime::{HookSet, Middleware, ModelCallError, ModelNext, ModelRequest, ModelResponse};
use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::{Semaphore, SemaphorePermit};

mod circuit_breaker;

use circuit_breaker::ProbeGuard;

use crate::hook::ModelResult;
pub use circuit_breaker::{
    Admission, CircuitBreaker, CircuitState, Clock, ManualClock, SystemClock,
};

/// The middleware's name in chain listings and `updates` node names.
pub const NAME: &str = "LLMErrorHandlingMiddleware";

/// Attempt budget for a stalled stream and for a burst-rate 429 (one retry); both only ever
/// tighten `retry_max_attempts`.
const TIGHT_BUDGET: u32 = 2;

const QUOTA_PATTERNS: &[&str] = &[
    "insufficient_quota",
    "quota",
    "billing",
    "credit",
    "payment",
    "余额不足",
    "超出限额",
    "额度不足",
    "欠费",
];
const AUTH_PATTERNS: &[&str] = &[
    "authentication",
    "unauthorized",
    "invalid api key",
    "invalid_api_key",
    "permission",
    "forbidden",
    "access denied",
    "无权",
    "未授权",
];
const BURST_PATTERNS: &[&str] = &[
    "limit_burst_rate",
    "rate increased too quickly",
    "burst rate",
    "请求速率增长过快",
    "突发速率",
];
const BUSY_PATTERNS: &[&str] = &[
    "server busy",
    "temporarily unavailable",
    "try again later",
    "please retry",
    "please try again",
    "overloaded",
    "high demand",
    "rate limit",
    "负载较高",
    "服务繁忙",
    "稍后重试",
    "请稍后重试",
];
/// Exception classes DeerFlow treats as transient whatever their message says.
const TRANSIENT_CLASSES: &[&str] = &[
    "APITimeoutError",
    "APIConnectionError",
    "InternalServerError",
    "ReadError",
    "RemoteProtocolError",
    "StreamChunkTimeoutError",
];
const RETRIABLE_STATUSES: &[u16] = &[408, 409, 425, 429, 500, 502, 503, 504];
/// The class whose exhaustion gets the "split or shorten" advice and a one-retry budget.
const STREAM_STALL_CLASS: &str = "StreamChunkTimeoutError";

const CIRCUIT_OPEN_TEXT: &str = "The LLM provider is unavailable right now: repeated failures opened the circuit breaker, which holds further requests back for a while. Please wait a moment, then continue the conversation.";

// ---------------------------------------------------------------------------------- settings

/// `circuit_breaker` and `llm_call` (spec 60 §23).
pub use antler_config::{CircuitBreakerConfig, LlmCallConfig};

/// Default of `llm_call.max_retry_after`.
pub const DEFAULT_MAX_RETRY_AFTER: Duration =
    Duration::from_secs(antler_config::DEFAULT_MAX_RETRY_AFTER_SECS as u64);

// -------------------------------------------------------------------------------- limiter

/// A FIFO cap on in-flight model calls. Permits are handed over in arrival order; a waiter
/// dropped after being granted a permit passes it on (tokio's semaphore guarantees both).
#[derive(Debug)]
pub struct LlmCallLimiter {
    sem: Semaphore,
    limit: usize,
}

static GLOBAL_LIMITER: OnceLock<Option<Arc<LlmCallLimiter>>> = OnceLock::new();

impl LlmCallLimiter {
    /// A private limiter (`None` for `limit == 0`: no cap).
    pub fn new(limit: u32) -> Option<Arc<LlmCallLimiter>> {
        (limit > 0).then(|| {
            Arc::new(LlmCallLimiter {
                sem: Semaphore::new(limit as usize),
                limit: limit as usize,
            })
        })
    }

    /// The process-wide limiter. The first call in the process fixes the cap (0 = none) and
    /// every later call returns that same limiter whatever it asks for: changing the cap needs
    /// a restart, so no downscale can strand waiters.
    pub fn global(limit: u32) -> Option<Arc<LlmCallLimiter>> {
        Self::global_in(&GLOBAL_LIMITER, limit)
    }

    fn global_in(
        cell: &OnceLock<Option<Arc<LlmCallLimiter>>>,
        limit: u32,
    ) -> Option<Arc<LlmCallLimiter>> {
        cell.get_or_init(|| Self::new(limit)).clone()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Calls currently holding a permit.
    pub fn in_flight(&self) -> usize {
        self.limit - self.sem.available_permits()
    }

    async fn acquire(&self) -> Option<SemaphorePermit<'_>> {
        // The semaphore is never closed, so an error cannot happen; run unbounded if it did.
        self.sem.acquire().await.ok()
    }
}

// --------------------------------------------------------------------------- classification

/// Why a call failed, as DeerFlow names it in `error_reason` and `llm_retry.reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReason {
    /// Account out of quota or billing blocked. Not retriable.
    Quota,
    /// Credentials or access rejected. Not retriable.
    Auth,
    /// The provider throttles a too-steep rise in request rate. Retriable, once, with a longer
    /// backoff; never trips the breaker.
    BurstRate,
    /// Timeouts, dropped connections, retriable HTTP statuses, malformed 2xx answers.
    Transient,
    /// The provider says it is busy. Retriable.
    Busy,
    /// Anything else. Not retriable.
    Generic,
}

impl ErrorReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::Quota => "quota",
            ErrorReason::Auth => "auth",
            ErrorReason::BurstRate => "burst_rate",
            ErrorReason::Transient => "transient",
            ErrorReason::Busy => "busy",
            ErrorReason::Generic => "generic",
        }
    }
}

/// What classification reads off a failure (DeerFlow reads the same off the Python exception).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorFacts {
    /// The failure's class as DeerFlow would name it (`RateLimitError`, `APITimeoutError`, …);
    /// reported as `error_type`.
    pub class: String,
    /// Human-readable text; reported as `error_detail`.
    pub detail: String,
    /// Provider error code/type (`insufficient_quota`, `limit_burst_rate`, …).
    pub code: Option<String>,
    pub status: Option<u16>,
    /// The provider's `Retry-After` / `retry-after-ms`.
    pub retry_after: Option<Duration>,
    /// Raw response body, searched for patterns along with `detail` (DeerFlow's exception text
    /// embeds the body).
    pub body: String,
    /// The failure is transient by nature (timeout, broken stream, malformed 2xx answer)
    /// whatever its text says.
    pub transient: bool,
}

impl ErrorFacts {
    pub fn from_model_error(e: &ModelError) -> ErrorFacts {
        let detail = e.to_string();
        match e {
            ModelError::Http {
                status,
                retry_after,
                code,
                body,
                ..
            } => ErrorFacts {
                class: status_class(*status).to_owned(),
                detail,
                code: code.clone(),
                status: Some(*status),
                retry_after: *retry_after,
                body: body.clone(),
                transient: false,
            },
            ModelError::Timeout(_) => ErrorFacts::transient("APITimeoutError", detail),
            ModelError::Connect(_) => ErrorFacts::transient("APIConnectionError", detail),
            ModelError::Stream(_) => ErrorFacts::transient("RemoteProtocolError", detail),
            // A 2xx that is not a completion: a gateway's `{"error": …}`, no choices (DeerFlow's
            // IndexError case), a truncated body. Its text still decides quota/auth first.
            ModelError::Decode(_) => ErrorFacts::transient("MalformedResponseError", detail),
            ModelError::InvalidRequest(_) => ErrorFacts::plain("InvalidRequestError", detail),
            ModelError::ScriptExhausted(_) => ErrorFacts::plain("ScriptExhausted", detail),
        }
    }

    fn plain(class: &str, detail: String) -> ErrorFacts {
        ErrorFacts {
            class: class.to_owned(),
            detail,
            ..Default::default()
        }
    }

    fn transient(class: &str, detail: String) -> ErrorFacts {
        ErrorFacts {
            transient: true,
            ..ErrorFacts::plain(class, detail)
        }
    }
}

/// The OpenAI SDK's exception class for an HTTP status.
fn status_class(status: u16) -> &'static str {
    match status {
        400 => "BadRequestError",
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        409 => "ConflictError",
        422 => "UnprocessableEntityError",
        429 => "RateLimitError",
        s if s >= 500 => "InternalServerError",
        _ => "APIStatusError",
    }
}

fn matches_any(text: &str, patterns: &[&str]) -> bool {
    patterns.iter().any(|p| text.contains(p))
}

/// Whether to retry, and why it failed (first match wins, as in DeerFlow): quota, auth
/// (by text, or HTTP 401/403), burst rate (by text or code), transient class, retriable
/// status, busy text, else generic.
pub fn classify(f: &ErrorFacts) -> (bool, ErrorReason) {
    let mut text = f.detail.to_lowercase();
    if !f.body.is_empty() && !f.detail.contains(&f.body) {
        text.push('\n');
        text.push_str(&f.body.to_lowercase());
    }
    let code = f.code.as_deref().unwrap_or("").to_lowercase();
    if matches_any(&text, QUOTA_PATTERNS) || matches_any(&code, QUOTA_PATTERNS) {
        return (false, ErrorReason::Quota);
    }
    if matches_any(&text, AUTH_PATTERNS) || matches!(f.status, Some(401 | 403)) {
        return (false, ErrorReason::Auth);
    }
    if matches_any(&text, BURST_PATTERNS) || matches_any(&code, BURST_PATTERNS) {
        return (true, ErrorReason::BurstRate);
    }
    if f.transient || TRANSIENT_CLASSES.contains(&f.class.as_str()) {
        return (true, ErrorReason::Transient);
    }
    if f.status.is_some_and(|s| RETRIABLE_STATUSES.contains(&s)) {
        return (true, ErrorReason::Transient);
    }
    if matches_any(&text, BUSY_PATTERNS) {
        return (true, ErrorReason::Busy);
    }
    (false, ErrorReason::Generic)
}

/// Attempts allowed for this failure: the configured ceiling, tightened to two for a stalled
/// stream and for a burst-rate 429.
pub fn max_attempts(settings: &LlmCallConfig, facts: &ErrorFacts, reason: ErrorReason) -> u32 {
    let mut n = settings.retry_max_attempts.max(1);
    if facts.class == STREAM_STALL_CLASS || reason == ErrorReason::BurstRate {
        n = n.min(TIGHT_BUDGET);
    }
    n
}

/// Delay before the next retry: the provider's `Retry-After` verbatim, else decorrelated
/// jitter — uniform in `[base, min(cap, max(base, 3 × seed))]` where the seed is the previous
/// delay (or the base on the first retry); the cap alone when the base exceeds it. Never more
/// than `max_retry_after` (a longer `Retry-After` is refused before this is asked, see
/// [`retry_after_too_long`]).
pub fn retry_delay_ms(
    settings: &LlmCallConfig,
    prev_delay_ms: Option<u64>,
    facts: &ErrorFacts,
    reason: ErrorReason,
    random: &mut dyn FnMut(u64, u64) -> u64,
) -> u64 {
    let ceiling =
        u64::try_from(settings.max_retry_after_duration().as_millis()).unwrap_or(u64::MAX);
    if let Some(after) = facts.retry_after {
        return u64::try_from(after.as_millis())
            .unwrap_or(u64::MAX)
            .min(ceiling);
    }
    let base = if reason == ErrorReason::BurstRate {
        settings.burst_retry_base_delay_ms
    } else {
        settings.retry_base_delay_ms
    };
    let cap = settings.retry_cap_delay_ms;
    let seed = prev_delay_ms.unwrap_or(base);
    let high = cap.min(base.max(seed.saturating_mul(3)));
    if high < base {
        return cap.min(ceiling);
    }
    random(base, high).min(ceiling)
}

/// The provider asked to wait longer than `max_retry_after`: waiting that out would hold the
/// run (and its client) for as long as the provider likes, so the call fails over instead.
pub fn retry_after_too_long(settings: &LlmCallConfig, facts: &ErrorFacts) -> bool {
    facts
        .retry_after
        .is_some_and(|after| after > settings.max_retry_after_duration())
}

/// A uniform integer in `[lo, hi]` from the OS generator (uuid v4 draws 122 random bits).
fn uniform(lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        return lo;
    }
    let span = u128::from(hi - lo) + 1;
    let draw = uuid::Uuid::new_v4().as_u128() % span;
    lo + u64::try_from(draw).unwrap_or(0)
}

/// `llm_retry.message`.
pub fn retry_message(attempt: u32, max_attempts: u32, wait_ms: u64, reason: ErrorReason) -> String {
    // Python's round() rounds halves to even; keep the same seconds.
    let seconds = ((wait_ms as f64 / 1000.0).round_ties_even() as u64).max(1);
    let why = match reason {
        ErrorReason::Busy => "provider is busy",
        ErrorReason::BurstRate => "provider is throttling request burst rate",
        ErrorReason::Quota | ErrorReason::Auth | ErrorReason::Transient | ErrorReason::Generic => {
            "provider request failed temporarily"
        }
    };
    format!("LLM request retry {attempt}/{max_attempts}: {why}. Retrying in {seconds}s.")
}

/// The `custom` event announcing a retry (spec 70 §4.8).
pub fn retry_event(attempt: u32, max_attempts: u32, wait_ms: u64, reason: ErrorReason) -> Value {
    json!({
        "type": "llm_retry",
        "attempt": attempt,
        "max_attempts": max_attempts,
        "wait_ms": wait_ms,
        "reason": reason.as_str(),
        "message": retry_message(attempt, max_attempts, wait_ms, reason),
    })
}

/// What the user reads when the call failed for good.
pub fn user_message(facts: &ErrorFacts, reason: ErrorReason) -> String {
    match reason {
        ErrorReason::Quota => "The LLM provider refused the request: the account is out of quota, its billing is unavailable, or its usage is restricted. Please sort out the provider account, then try again.".to_owned(),
        ErrorReason::Auth => "The LLM provider refused the request because its authentication or access is invalid. Please check the provider credentials and permissions, then try again.".to_owned(),
        ErrorReason::BurstRate => "The LLM provider is throttling requests because the request rate rose too quickly (a burst-rate limit). Please wait a moment, then try again.".to_owned(),
        ErrorReason::Busy | ErrorReason::Transient if facts.class == STREAM_STALL_CLASS => "The model's streaming response was interrupted before it could finish. This usually means a single answer or tool call was very large: ask the assistant to split the work into smaller steps or to shorten the output, then try again.".to_owned(),
        ErrorReason::Busy | ErrorReason::Transient => "The LLM provider is temporarily unavailable even after several retries. Please wait a moment, then continue the conversation.".to_owned(),
        ErrorReason::Generic => format!("LLM request failed: {}", facts.detail),
    }
}

/// An assistant message standing in for a failed call, with the markers of spec 10 §1.6.
pub fn fallback_message(
    content: String,
    error_type: &str,
    reason: &str,
    detail: &str,
) -> AiMessage {
    let mut kw = Object::new();
    kw.insert("deerflow_error_fallback".into(), Value::Bool(true));
    kw.insert("error_type".into(), Value::from(error_type));
    kw.insert("error_reason".into(), Value::from(reason));
    kw.insert("error_detail".into(), Value::from(detail));
    AiMessage {
        content: Content::Text(content),
        additional_kwargs: kw.into(),
        ..Default::default()
    }
}

/// Whether a message is a synthetic error fallback (the run worker marks such runs `error`).
pub fn is_error_fallback(msg: &AiMessage) -> bool {
    msg.additional_kwargs
        .get("deerflow_error_fallback")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

// ------------------------------------------------------------------------------ middleware

type Random = Arc<dyn Fn(u64, u64) -> u64 + Send + Sync>;

/// Retries, circuit breaking and error fallbacks around every model call.
pub struct LlmErrorHandlingMiddleware {
    settings: LlmCallConfig,
    breaker: Arc<CircuitBreaker>,
    limiter: Option<Arc<LlmCallLimiter>>,
    clock: Arc<dyn Clock>,
    random: Random,
}

impl LlmErrorHandlingMiddleware {
    /// `breaker` is shared with every other run of the process; the concurrency cap is the
    /// process-wide [`LlmCallLimiter::global`] (fixed by the first middleware built).
    pub fn new(settings: LlmCallConfig, breaker: Arc<CircuitBreaker>) -> Self {
        let limiter = LlmCallLimiter::global(settings.max_concurrent_calls);
        LlmErrorHandlingMiddleware {
            settings,
            breaker,
            limiter,
            clock: Arc::new(SystemClock),
            random: Arc::new(uniform),
        }
    }

    /// Use this limiter instead of the process-wide one (`None`: no cap).
    pub fn with_limiter(mut self, limiter: Option<Arc<LlmCallLimiter>>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Sleep (and read time) through this clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Draw jittered delays with `f(low, high)` (inclusive bounds) instead of the OS generator.
    pub fn with_random(mut self, f: impl Fn(u64, u64) -> u64 + Send + Sync + 'static) -> Self {
        self.random = Arc::new(f);
        self
    }

    pub fn settings(&self) -> &LlmCallConfig {
        &self.settings
    }

    pub fn breaker(&self) -> &Arc<CircuitBreaker> {
        &self.breaker
    }

    pub fn limiter(&self) -> Option<&Arc<LlmCallLimiter>> {
        self.limiter.as_ref()
    }

    /// One attempt, holding a limiter permit only while it runs. `None` when cancelled while
    /// waiting for a permit.
    async fn attempt(
        &self,
        req: &ModelRequest,
        next: ModelNext<'_>,
    ) -> Option<Result<ModelResponse, ModelCallError>> {
        let _permit = match &self.limiter {
            Some(l) => tokio::select! {
                biased;
                _ = req.run.cancel.cancelled() => return None,
                p = l.acquire() => p,
            },
            None => None,
        };
        Some(next.run(req.clone()).await)
    }
}

fn facts_of(e: &ModelCallError) -> ErrorFacts {
    match e {
        ModelCallError::Model(m) => ErrorFacts::from_model_error(m),
        ModelCallError::Middleware(m) => ErrorFacts::plain("MiddlewareError", m.to_string()),
    }
}

#[async_trait]
impl Middleware for LlmErrorHandlingMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL);

    async fn wrap_model_call(&self, req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        let probe = match self.breaker.admit() {
            Admission::Denied => {
                tracing::warn!("LLM circuit breaker is open; not calling the model");
                let mut msg = fallback_message(
                    CIRCUIT_OPEN_TEXT.to_owned(),
                    "CircuitBreakerOpen",
                    "circuit_open",
                    "LLM circuit breaker is open",
                );
                msg.id = Some(req.message_id.clone());
                return Ok(msg.into());
            }
            Admission::Probe => true,
            Admission::Allowed => false,
        };
        // Armed only for a probe: an abandoned probe must free the breaker's single slot.
        let guard = ProbeGuard::new(&self.breaker, probe);

        let mut attempt: u32 = 1;
        let mut prev_delay: Option<u64> = None;
        loop {
            let err = match self.attempt(&req, next).await {
                Some(Ok(resp)) => {
                    guard.success();
                    return Ok(resp);
                }
                Some(Err(e)) => e,
                // Cancelled while queued for a permit: the loop is already stopping.
                None => return Err(cancelled_while_queued()),
            };
            let facts = facts_of(&err);
            let (retriable, reason) = classify(&facts);
            let budget = max_attempts(&self.settings, &facts, reason);
            let mut retry = retriable && attempt < budget;
            if retry && retry_after_too_long(&self.settings, &facts) {
                // Treated like exhausted retries: the fallback below, breaker updated as usual.
                tracing::warn!(
                    attempt,
                    retry_after = ?facts.retry_after,
                    max_retry_after = ?self.settings.max_retry_after,
                    reason = reason.as_str(),
                    "provider asked to wait longer than llm_call.max_retry_after; not retrying"
                );
                retry = false;
            }
            if retry {
                let wait_ms =
                    retry_delay_ms(&self.settings, prev_delay, &facts, reason, &mut |lo, hi| {
                        (self.random)(lo, hi)
                    });
                prev_delay = Some(wait_ms);
                tracing::warn!(
                    attempt,
                    max_attempts = budget,
                    wait_ms,
                    reason = reason.as_str(),
                    error = %facts.detail,
                    "transient LLM error; retrying"
                );
                req.run
                    .events
                    .custom(retry_event(attempt, budget, wait_ms, reason));
                tokio::select! {
                    biased;
                    _ = req.run.cancel.cancelled() => return Err(err),
                    _ = self.clock.sleep(Duration::from_millis(wait_ms)) => {}
                }
                attempt += 1;
                continue;
            }
            tracing::warn!(
                attempts = attempt,
                reason = reason.as_str(),
                error = %facts.detail,
                "LLM call failed; answering with an error message"
            );
            if retriable && reason != ErrorReason::BurstRate {
                guard.failure();
            } else {
                // Not the provider being down: free a probe, never count towards tripping.
                guard.release();
            }
            let mut msg = fallback_message(
                user_message(&facts, reason),
                &facts.class,
                reason.as_str(),
                &facts.detail,
            );
            msg.id = Some(req.message_id.clone());
            return Ok(msg.into());
        }
    }
}

/// The error returned when the run is cancelled while a call waits for a limiter permit. The
/// loop discards it (it observed the cancellation first); callers outside the loop see a
/// middleware error naming the cause.
fn cancelled_while_queued() -> ModelCallError {
    ModelCallError::Middleware(antler_runtime::MiddlewareError::new(
        NAME,
        "run cancelled while waiting for an LLM call slot",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(class: &str, detail: &str) -> ErrorFacts {
        ErrorFacts {
            class: class.into(),
            detail: detail.into(),
            ..Default::default()
        }
    }

    #[test]
    fn stream_stall_and_connection_drops_are_transient() {
        for class in [
            "ReadError",
            "RemoteProtocolError",
            "StreamChunkTimeoutError",
            "APITimeoutError",
        ] {
            assert_eq!(
                classify(&facts(class, "x")),
                (true, ErrorReason::Transient),
                "{class}"
            );
        }
    }

    #[test]
    fn a_stalled_stream_gets_one_retry_and_the_split_advice() {
        let s = LlmCallConfig::default();
        let stall = facts(STREAM_STALL_CLASS, "No streaming chunk received for 120.0s");
        assert_eq!(max_attempts(&s, &stall, ErrorReason::Transient), 2);
        for other in ["ReadError", "RemoteProtocolError", "Whatever"] {
            assert_eq!(
                max_attempts(&s, &facts(other, "x"), ErrorReason::Transient),
                3
            );
        }
        // Overrides only tighten the user's ceiling.
        let one = LlmCallConfig {
            retry_max_attempts: 1,
            ..Default::default()
        };
        assert_eq!(max_attempts(&one, &stall, ErrorReason::Transient), 1);

        let text = user_message(&stall, ErrorReason::Transient);
        assert!(text.contains("streaming response was interrupted"));
        assert!(text.contains("split") || text.contains("shorten"));
        assert!(!text.contains("temporarily unavailable"));
        for other in ["ReadError", "RemoteProtocolError", "InternalServerError"] {
            let text = user_message(&facts(other, "x"), ErrorReason::Transient);
            assert!(text.contains("temporarily unavailable"), "{other}");
            assert!(!text.contains("streaming response was interrupted"));
        }
    }

    #[test]
    fn the_global_limiter_is_frozen_by_its_first_construction() {
        let cell = OnceLock::new();
        let first = LlmCallLimiter::global_in(&cell, 2).expect("capped");
        let later = LlmCallLimiter::global_in(&cell, 7).expect("still capped");
        assert!(Arc::ptr_eq(&first, &later));
        assert_eq!(later.limit(), 2);
        assert!(LlmCallLimiter::global_in(&cell, 0).is_some());

        let disabled = OnceLock::new();
        assert!(LlmCallLimiter::global_in(&disabled, 0).is_none());
        assert!(LlmCallLimiter::global_in(&disabled, 5).is_none());
    }

    #[test]
    fn uniform_stays_in_bounds_and_varies() {
        let draws: Vec<u64> = (0..200).map(|_| uniform(5_000, 8_000)).collect();
        assert!(draws.iter().all(|d| (5_000..=8_000).contains(d)));
        let distinct: std::collections::HashSet<_> = draws.iter().collect();
        assert!(distinct.len() > 20);
        assert_eq!(uniform(7, 7), 7);
    }
}
