//! Test support (filled in by the models work).
