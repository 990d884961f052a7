//! antler-middleware's integration tests, compiled into one binary (`suite/` has one module per
//! middleware or group; `common/` the helpers they share).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod suite;
