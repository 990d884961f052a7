//! Anthropic messages API (in progress).
