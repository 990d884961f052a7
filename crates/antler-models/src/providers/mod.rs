//! Provider adapters. Each keeps its wire types private.

pub mod anthropic;
pub(crate) mod http;
pub mod openai_compat;
pub(crate) mod sse;
