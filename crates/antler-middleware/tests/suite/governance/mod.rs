//! DanglingToolCall, LLMErrorHandling, Guardrail and Clarification: DeerFlow's test expectations
//! (spec 30) restated, and the four through the agent loop with a scripted model (and, for the
//! HTTP-level cases, a real OpenAI-compatible provider against a loopback server).

mod common;

mod clarification;
mod control_flow;
mod dangling;
mod guardrail;
mod llm_errors;
mod llm_http;
