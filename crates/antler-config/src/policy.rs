//! `guardrails`, `authorization`, `circuit_breaker`, `llm_call` (spec 60 §19, §23).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tools::PluginRef;

/// `guardrails` (§19): evaluate every tool call before it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuardrailsConfig {
    /// Off by default.
    pub enabled: bool,
    /// A provider error blocks the call.
    pub fail_closed: bool,
    /// OAP passport path / agent id.
    pub passport: Option<String>,
    /// `{use, config}`; built-in `deerflow.guardrails.builtin:AllowlistProvider` reads
    /// `allowed_tools` (null = all, `[]` = none) and `denied_tools` from `config`.
    pub provider: Option<PluginRef>,
}

impl Default for GuardrailsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            fail_closed: true,
            passport: None,
            provider: None,
        }
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

/// `circuit_breaker` (§23): LLM calls fast-fail while open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CircuitBreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failure_threshold: u32,
    /// Seconds before a half-open probe.
    pub recovery_timeout_sec: f64,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            recovery_timeout_sec: 60.0,
        }
    }
}

/// Default of `llm_call.max_retry_after`: a minute is the longest a chat turn should sit silent
/// on one provider hint.
pub const DEFAULT_MAX_RETRY_AFTER_SECS: f64 = 60.0;

/// `llm_call` (§23): concurrency and retry policy for model calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LlmCallConfig {
    /// 0 = unlimited.
    pub max_concurrent_calls: u32,
    /// Attempts including the first.
    pub retry_max_attempts: u32,
    /// Exponential backoff base.
    pub retry_base_delay_ms: u64,
    /// Backoff cap.
    pub retry_cap_delay_ms: u64,
    /// Base delay after a rate-limit burst.
    pub burst_retry_base_delay_ms: u64,
    /// antler extension: longest wait (seconds) before a retry. A provider `Retry-After`
    /// beyond it is not waited out (the call fails over to the error message at once), and no
    /// computed backoff exceeds it either.
    pub max_retry_after: f64,
}

impl LlmCallConfig {
    /// `max_retry_after` as a duration; negative means zero, and a value too large for one
    /// (`.inf`) means no cap.
    pub fn max_retry_after_duration(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.max_retry_after.max(0.0))
            .unwrap_or(std::time::Duration::MAX)
    }
}

impl Default for LlmCallConfig {
    fn default() -> Self {
        Self {
            max_concurrent_calls: 0,
            retry_max_attempts: 3,
            retry_base_delay_ms: 1_000,
            retry_cap_delay_ms: 8_000,
            burst_retry_base_delay_ms: 5_000,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER_SECS,
        }
    }
}
