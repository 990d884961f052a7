//! Provider adapters. Each keeps its wire types private.

pub mod anthropic;
pub(crate) mod http;
pub mod openai_compat;
pub(crate) mod read;
pub(crate) mod sse;

pub use read::DEFAULT_CALL_TIMEOUT;
