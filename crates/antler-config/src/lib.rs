//! config.yaml loading (filled in by the config work).
