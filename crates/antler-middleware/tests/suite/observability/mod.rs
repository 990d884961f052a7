//! TokenUsage (L7), Title (L8) and ViewImage (L10): DeerFlow's test expectations and runs
//! through the agent loop with a scripted model.

mod common;
mod title;
mod token_usage;
mod view_image;
