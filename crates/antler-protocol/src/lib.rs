//! antler's wire types: LangChain messages, `ThreadState` with DeerFlow's reducers, and the run
//! stream events. Serde only, no I/O: everything a client sees is defined here.

pub mod api;
pub mod checkpoint;
pub mod events;
pub mod hash;
pub mod heap;
pub mod identity;
pub mod markers;
pub mod message_list;
pub mod messages;
pub mod reducers;
pub mod shared;
pub mod state;

pub use events::{MessageMeta, StreamEvent, StreamMessage, StreamModes};
pub use message_list::{AddMessagesError, Change, Entry, Messages};
pub use messages::{
    AiMessage, AiMessageChunk, Content, HumanMessage, InvalidToolCall, Message, MessageParseError,
    MessageRef, Object, RemoveMessage, SystemMessage, ToolCall, ToolCallChunk, ToolMessage,
    ToolStatus, UsageMetadata, REMOVE_ALL_MESSAGES,
};
pub use shared::Shared;
pub use state::{
    Delegation, Promoted, ReducerError, SandboxState, SkillEntry, StateSnapshot, StateUpdate,
    ThreadData, ThreadState, Todo, TodoStatus, ViewedImage,
};
pub mod tool_meta;
pub mod tools;
pub mod untrusted;
pub use tools::ToolSpec;
