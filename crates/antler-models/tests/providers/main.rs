//! The provider adapters against the mock servers of `antler-test-support`, in one test binary:
//! the driver's behaviour for every provider (`driver.rs`, run once per [`common::Vendor`]) and
//! each wire format's own mapping (`openai_compat.rs`, `anthropic.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod anthropic;
mod common;
mod driver;
mod gemini;
mod ollama;
mod openai_compat;
mod openai_responses;
