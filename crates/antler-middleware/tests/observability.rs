//! TokenUsage (L7), Title (L8) and ViewImage (L10): DeerFlow's test expectations and runs
//! through the agent loop with a scripted model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "observability/common.rs"]
mod common;
#[path = "observability/title.rs"]
mod title;
#[path = "observability/token_usage.rs"]
mod token_usage;
#[path = "observability/view_image.rs"]
mod view_image;
