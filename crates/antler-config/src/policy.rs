//! `guardrails`, `authorization`, `circuit_breaker`, `llm_call` (spec 60 §19, §23).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tools::PluginRef;

use crate::de::section;

section! {
    /// `guardrails` (§19): evaluate every tool call before it runs.
    pub struct GuardrailsConfig {
        /// Off by default.
        pub enabled: bool = false,
        /// A provider error blocks the call.
        pub fail_closed: bool = true,
        /// OAP passport path / agent id.
        pub passport: Option<String> = None,
        /// `{use, config}`; built-in `deerflow.guardrails.builtin:AllowlistProvider` reads
        /// `allowed_tools` (null = all, `[]` = none) and `denied_tools` from `config`.
        pub provider: Option<PluginRef> = None,
    }
}

/// `authorization` (EXTRA): RBAC over tools/routes/models; only `enabled` is typed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthorizationConfig {
    /// Off by default.
    pub enabled: bool,
    /// `fail_closed`, `default_role`, `provider`, …, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

section! {
    /// `circuit_breaker` (§23): LLM calls fast-fail while open.
    pub struct CircuitBreakerConfig {
        /// Consecutive failures that open the breaker.
        pub failure_threshold: u32 = 5,
        /// Seconds before a half-open probe.
        pub recovery_timeout_sec: f64 = 60.0,
    }
}

/// Default of `llm_call.max_retry_after`: a minute is the longest a chat turn should sit silent
/// on one provider hint.
pub const DEFAULT_MAX_RETRY_AFTER_SECS: f64 = 60.0;

section! {
    /// `llm_call` (§23): concurrency and retry policy for model calls.
    pub struct LlmCallConfig {
        /// 0 = unlimited.
        pub max_concurrent_calls: u32 = 0,
        /// Attempts including the first.
        pub retry_max_attempts: u32 = 3,
        /// Exponential backoff base.
        pub retry_base_delay_ms: u64 = 1_000,
        /// Backoff cap.
        pub retry_cap_delay_ms: u64 = 8_000,
        /// Base delay after a rate-limit burst.
        pub burst_retry_base_delay_ms: u64 = 5_000,
        /// antler extension: longest wait (seconds) before a retry. A provider `Retry-After`
        /// beyond it is not waited out (the call fails over to the error message at once), and no
        /// computed backoff exceeds it either.
        pub max_retry_after: f64 = DEFAULT_MAX_RETRY_AFTER_SECS,
    }
}

impl LlmCallConfig {
    /// `max_retry_after` as a duration; negative means zero, and a value too large for one
    /// (`.inf`) means no cap.
    pub fn max_retry_after_duration(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.max_retry_after.max(0.0))
            .unwrap_or(std::time::Duration::MAX)
    }
}
