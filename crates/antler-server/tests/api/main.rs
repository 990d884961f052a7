//! Integration tests of `antler serve`, one module per area, over real sockets on 127.0.0.1 with
//! a scripted model (spec 70 is what they check).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod connections;
mod gateway;
mod mcp;
mod runs;
mod security;
mod streaming;
mod threads;
