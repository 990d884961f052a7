//! Provider adapters. Each keeps its wire types private.

pub mod openai_compat;
