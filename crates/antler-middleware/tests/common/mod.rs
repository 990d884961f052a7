//! Helpers shared by every suite module.
