//! The agent loop (filled in next).
pub mod checkpoint;
pub use checkpoint::{Checkpoint, CheckpointError, CheckpointMeta, CheckpointWrite, Checkpointer, MemoryCheckpointer};
