//! DeerFlowSummarizationMiddleware: the expectations of spec 40 §1 (DeerFlow's
//! `test_summarization_middleware.py` / `test_summarization_summary_text.py`, restated for the
//! seeds' summary-message shape), the seeds' skill rescue, and runs through the agent loop.

pub mod support;

mod hooks;
mod models;
mod prompt;
mod rescue;
mod through_loop;
mod triggers;
