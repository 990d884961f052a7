//! Provider adapters. Each keeps its wire types private.

pub mod anthropic;
pub mod openai_compat;
