//! DynamicContext (in progress). The memory interface below is shared with the memory system.

use async_trait::async_trait;

/// Where DynamicContext gets the user's memory block (`<memory>…</memory>` content), already
/// capped to its token budget. Implemented by the long-term memory system.
#[async_trait]
pub trait MemorySource: Send + Sync {
    /// The text to inject for this user (and custom agent), or `None` when there is nothing.
    async fn injection(&self, user_id: Option<&str>, agent_name: Option<&str>) -> Option<String>;
}
