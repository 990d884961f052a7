//! The subagent status contract (spec 50 §4.12 "Result message"): the terminal statuses and stop
//! reasons a delegation can end with, the model-visible result text of each, and the structured
//! `additional_kwargs` the `task` tool message carries for runtime consumers (the delegation
//! ledger, token accounting, the web UI). The text is display content; the kwargs are the
//! contract.

use std::fmt;
use std::str::FromStr;

use antler_protocol::{Object, UsageMetadata};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub const STATUS_KEY: &str = "subagent_status";
pub const STOP_REASON_KEY: &str = "subagent_stop_reason";
pub const ERROR_KEY: &str = "subagent_error";
pub const RESULT_BRIEF_KEY: &str = "subagent_result_brief";
pub const RESULT_SHA256_KEY: &str = "subagent_result_sha256";
pub const MODEL_NAME_KEY: &str = "subagent_model_name";
pub const TOKEN_USAGE_KEY: &str = "subagent_token_usage";
/// Longest brief/error kept in the metadata (head 2/3 + `"\n...\n"` + tail).
pub const METADATA_TEXT_MAX_CHARS: usize = 2000;

/// How a delegation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubagentStatus {
    /// Finished with an answer (possibly a partial one, with a stop reason).
    Completed,
    Failed,
    /// The parent run was cancelled.
    Cancelled,
    /// The per-task timeout expired.
    TimedOut,
    /// DeerFlow's polling safety net fired. Part of the contract for readers; antler's executor
    /// never produces it (its timeout drops the child itself, nothing is left to poll).
    PollingTimedOut,
}

impl SubagentStatus {
    pub const ALL: [SubagentStatus; 5] = [
        SubagentStatus::Completed,
        SubagentStatus::Failed,
        SubagentStatus::Cancelled,
        SubagentStatus::TimedOut,
        SubagentStatus::PollingTimedOut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SubagentStatus::Completed => "completed",
            SubagentStatus::Failed => "failed",
            SubagentStatus::Cancelled => "cancelled",
            SubagentStatus::TimedOut => "timed_out",
            SubagentStatus::PollingTimedOut => "polling_timed_out",
        }
    }

    /// The custom stream event announcing this end (`task_completed`, …).
    pub fn event_type(self) -> &'static str {
        match self {
            SubagentStatus::Completed => "task_completed",
            SubagentStatus::Failed => "task_failed",
            SubagentStatus::Cancelled => "task_cancelled",
            SubagentStatus::TimedOut | SubagentStatus::PollingTimedOut => "task_timed_out",
        }
    }
}

impl fmt::Display for SubagentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value outside the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid subagent {kind} '{value}'; expected one of {expected}")]
pub struct ContractError {
    kind: &'static str,
    value: String,
    expected: String,
}

/// The value of `all` whose wire name is `s`; a [`ContractError`] naming `kind` otherwise.
fn parse_named<T: Copy, const N: usize>(
    s: &str,
    kind: &'static str,
    all: [T; N],
    name: fn(T) -> &'static str,
) -> Result<T, ContractError> {
    all.into_iter()
        .find(|v| name(*v) == s)
        .ok_or_else(|| ContractError {
            kind,
            value: s.to_owned(),
            expected: all.map(name).join(", "),
        })
}

impl FromStr for SubagentStatus {
    type Err = ContractError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named(s, "status", SubagentStatus::ALL, SubagentStatus::as_str)
    }
}

/// Why a guard ended a delegation early. Carried beside the status, never as one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    TokenCapped,
    TurnCapped,
    LoopCapped,
}

impl StopReason {
    pub const ALL: [StopReason; 3] = [
        StopReason::TokenCapped,
        StopReason::TurnCapped,
        StopReason::LoopCapped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::TokenCapped => "token_capped",
            StopReason::TurnCapped => "turn_capped",
            StopReason::LoopCapped => "loop_capped",
        }
    }

    /// The label folded into the result text (`Task Succeeded (capped: {label})`).
    pub fn label(self) -> &'static str {
        match self {
            StopReason::TokenCapped => "token budget",
            StopReason::TurnCapped => "turn budget",
            StopReason::LoopCapped => "repeated tool-call loop",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StopReason {
    type Err = ContractError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named(s, "stop_reason", StopReason::ALL, StopReason::as_str)
    }
}

/// Summed token usage of a delegation's model calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

impl TokenUsage {
    /// One model call's usage as a record: `total = input + output` when the provider reported
    /// no total; `None` for zero usage (such calls are not recorded).
    pub fn record(usage: &UsageMetadata) -> Option<TokenUsage> {
        let total = if usage.total_tokens > 0 {
            usage.total_tokens
        } else {
            usage.input_tokens + usage.output_tokens
        };
        (total > 0).then_some(TokenUsage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            total_tokens: total,
        })
    }

    pub fn plus(self, other: TokenUsage) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens + other.input_tokens,
            output_tokens: self.output_tokens + other.output_tokens,
            total_tokens: self.total_tokens + other.total_tokens,
        }
    }

    pub fn to_value(self) -> Value {
        serde_json::json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        })
    }

    /// Read the contract shape: all three keys, non-negative integers (booleans and floats
    /// rejected); anything else is `None`.
    pub fn from_value(v: &Value) -> Option<TokenUsage> {
        let o = v.as_object()?;
        let get = |k: &str| {
            o.get(k)
                .and_then(|v| if v.is_u64() { v.as_u64() } else { None })
        };
        Some(TokenUsage {
            input_tokens: get("input_tokens")?,
            output_tokens: get("output_tokens")?,
            total_tokens: get("total_tokens")?,
        })
    }
}

/// How one delegation ended, as the `task` tool reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentResult {
    pub status: SubagentStatus,
    /// The answer (completed only).
    pub result: Option<String>,
    pub error: Option<String>,
    pub stop_reason: Option<StopReason>,
    /// The model the subagent ran on.
    pub model_name: Option<String>,
    /// Summed usage of its model calls; `None` when none reported usage.
    pub usage: Option<TokenUsage>,
    /// Every step message (AI turns and tool results) the subagent produced, serialized.
    pub steps: Vec<Value>,
}

impl SubagentResult {
    /// A result with only its status set.
    pub fn new(status: SubagentStatus) -> Self {
        SubagentResult {
            status,
            result: None,
            error: None,
            stop_reason: None,
            model_name: None,
            usage: None,
            steps: Vec::new(),
        }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        SubagentResult {
            error: Some(error.into()),
            ..Self::new(SubagentStatus::Failed)
        }
    }

    /// Model-visible content and the normalized error for the metadata.
    pub fn message_text(&self) -> (String, Option<String>) {
        format_result_message(
            self.status,
            self.result.as_deref(),
            self.error.as_deref(),
            self.stop_reason,
        )
    }

    /// The structured `additional_kwargs` of the result message.
    pub fn additional_kwargs(&self) -> Object {
        let (_, error) = self.message_text();
        result_additional_kwargs(
            self.status,
            self.result.as_deref(),
            error.as_deref(),
            self.stop_reason,
            self.model_name.as_deref(),
            self.usage,
        )
    }
}

/// Bound `text` (trimmed) to `cap` chars: the first 2/3, `"\n...\n"`, then the tail.
pub fn bound_text(text: &str, cap: usize) -> String {
    let cleaned = text.trim();
    let chars: Vec<char> = cleaned.chars().collect();
    if chars.len() <= cap {
        return cleaned.to_owned();
    }
    const MARKER: &str = "\n...\n";
    let marker_len = MARKER.chars().count();
    if cap <= marker_len {
        return chars[..cap].iter().collect();
    }
    let head = cap * 2 / 3;
    let tail = cap - head - marker_len;
    if tail == 0 {
        return chars[..cap].iter().collect();
    }
    let mut out: String = chars[..head].iter().collect();
    out.push_str(MARKER);
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// Lowercase hex SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The model-visible text of a result, and the error recorded in the metadata.
pub fn format_result_message(
    status: SubagentStatus,
    result: Option<&str>,
    error: Option<&str>,
    stop_reason: Option<StopReason>,
) -> (String, Option<String>) {
    let result = result.unwrap_or("");
    let error = error.map(str::trim).unwrap_or("");
    let capped = stop_reason.map(StopReason::label);
    let with_default = |default: &str| {
        if error.is_empty() {
            default.to_owned()
        } else {
            error.to_owned()
        }
    };
    // `default` alone, or followed by the error when there is one.
    let headed = |default: &str| {
        let detail = with_default(default);
        let text = if detail == default {
            detail.clone()
        } else {
            format!("{default} Error: {detail}")
        };
        (text, Some(detail))
    };
    match status {
        SubagentStatus::Completed => match capped {
            Some(label) => (
                format!("Task Succeeded (capped: {label}). Result: {result}"),
                None,
            ),
            None => (format!("Task Succeeded. Result: {result}"), None),
        },
        SubagentStatus::Cancelled => headed("Task cancelled by user."),
        SubagentStatus::TimedOut => headed("Task timed out."),
        SubagentStatus::PollingTimedOut => {
            let detail = with_default("Task polling timed out.");
            (detail.clone(), Some(detail))
        }
        SubagentStatus::Failed => {
            let detail = with_default("Task failed.");
            let bare = detail == "Task failed.";
            let text = match (capped, bare) {
                (Some(label), true) => format!("Task failed (capped: {label})."),
                (Some(label), false) => format!("Task failed (capped: {label}). Error: {detail}"),
                (None, true) => detail.clone(),
                (None, false) => format!("Task failed. Error: {detail}"),
            };
            (text, Some(detail))
        }
    }
}

/// The structured `additional_kwargs` of a `task` result: status always; brief + sha256 of the
/// full result for completed; the bounded error otherwise (omitted when blank); stop reason,
/// model name and usage when known.
pub fn result_additional_kwargs(
    status: SubagentStatus,
    result: Option<&str>,
    error: Option<&str>,
    stop_reason: Option<StopReason>,
    model_name: Option<&str>,
    usage: Option<TokenUsage>,
) -> Object {
    let mut o = Object::new();
    o.insert(STATUS_KEY.into(), Value::from(status.as_str()));
    if status == SubagentStatus::Completed {
        if let Some(r) = result.filter(|r| !r.trim().is_empty()) {
            o.insert(
                RESULT_BRIEF_KEY.into(),
                Value::from(bound_text(r, METADATA_TEXT_MAX_CHARS)),
            );
            o.insert(RESULT_SHA256_KEY.into(), Value::from(sha256_hex(r)));
        }
    } else if let Some(e) = error.filter(|e| !e.trim().is_empty()) {
        o.insert(
            ERROR_KEY.into(),
            Value::from(bound_text(e, METADATA_TEXT_MAX_CHARS)),
        );
    }
    if let Some(s) = stop_reason {
        o.insert(STOP_REASON_KEY.into(), Value::from(s.as_str()));
    }
    if let Some(m) = model_name.map(str::trim).filter(|m| !m.is_empty()) {
        o.insert(MODEL_NAME_KEY.into(), Value::from(m));
    }
    if let Some(u) = usage {
        o.insert(TOKEN_USAGE_KEY.into(), u.to_value());
    }
    o
}

/// The structured facts read back from a `task` result message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StructuredResult {
    pub status: Option<SubagentStatus>,
    pub stop_reason: Option<StopReason>,
    pub result_brief: Option<String>,
    pub result_sha256: Option<String>,
    pub error: Option<String>,
    pub token_usage: Option<TokenUsage>,
}

/// Read the contract from a tool message's `additional_kwargs`. `None` when there is no valid
/// status. The legacy status `max_turns_reached` maps to `completed` (with a brief) or `failed`,
/// stop reason `turn_capped`; digests that are not 64 lowercase hex chars are dropped.
pub fn read_result_metadata(kwargs: &Object) -> Option<StructuredResult> {
    let raw_status = kwargs.get(STATUS_KEY).and_then(Value::as_str)?;
    let brief = kwargs
        .get(RESULT_BRIEF_KEY)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty());
    let (status, legacy_stop) = if raw_status == "max_turns_reached" {
        let s = if brief.is_some() {
            SubagentStatus::Completed
        } else {
            SubagentStatus::Failed
        };
        (s, Some(StopReason::TurnCapped))
    } else {
        (raw_status.parse().ok()?, None)
    };
    let mut out = StructuredResult {
        status: Some(status),
        ..Default::default()
    };
    if status == SubagentStatus::Completed {
        if let Some(b) = brief {
            out.result_brief = Some(bound_text(b, METADATA_TEXT_MAX_CHARS));
            out.result_sha256 = kwargs
                .get(RESULT_SHA256_KEY)
                .and_then(Value::as_str)
                .filter(|h| is_sha256_hex(h))
                .map(str::to_owned);
        }
    } else if let Some(e) = kwargs
        .get(ERROR_KEY)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
    {
        out.error = Some(bound_text(e, METADATA_TEXT_MAX_CHARS));
    }
    out.stop_reason = kwargs
        .get(STOP_REASON_KEY)
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .or(legacy_stop);
    out.token_usage = kwargs.get(TOKEN_USAGE_KEY).and_then(TokenUsage::from_value);
    Some(out)
}
