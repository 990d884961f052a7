//! Summarization (in progress). The hook interface below is shared with the memory system.

use antler_protocol::Message;
use async_trait::async_trait;

/// What is about to be compressed away.
#[derive(Clone, Debug)]
pub struct SummarizationEvent {
    pub thread_id: String,
    pub user_id: Option<String>,
    pub agent_name: Option<String>,
    /// The messages that the summary will replace, in order.
    pub messages: Vec<Message>,
}

/// Called before a summary replaces old messages (e.g. to flush them to long-term memory).
/// A failing hook is logged and never blocks summarization or the other hooks.
#[async_trait]
pub trait BeforeSummarizationHook: Send + Sync {
    async fn before_summarization(&self, event: &SummarizationEvent) -> Result<(), String>;
}
