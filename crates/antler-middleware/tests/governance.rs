//! DanglingToolCall, LLMErrorHandling, Guardrail and Clarification: DeerFlow's test expectations
//! (spec 30) restated, and the four through the agent loop with a scripted model (and, for the
//! HTTP-level cases, a real OpenAI-compatible provider against a loopback server).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "governance/common.rs"]
mod common;

#[path = "governance/clarification.rs"]
mod clarification;
#[path = "governance/control_flow.rs"]
mod control_flow;
#[path = "governance/dangling.rs"]
mod dangling;
#[path = "governance/guardrail.rs"]
mod guardrail;
#[path = "governance/llm_errors.rs"]
mod llm_errors;
#[path = "governance/llm_http.rs"]
mod llm_http;
