//! Integration tests of antler-store against real SQLite files in temporary directories.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod suite;
