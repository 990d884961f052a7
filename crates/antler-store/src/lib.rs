//! Persistence (filled in by the store work).
