//! ThreadState JSON as clients see it (CONTRACT "ThreadState JSON"), pinned with snapshots: a
//! change here changes what the web UI, the SDKs and `--output json` read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use antler_protocol::ThreadState;
use serde_json::json;

#[test]
fn empty_thread_state_json() {
    insta::assert_json_snapshot!("empty_thread_state", ThreadState::default());
}

#[test]
fn full_thread_state_json() {
    let state: ThreadState = serde_json::from_value(json!({
        "messages": [
            {"type": "human", "id": "h1", "content": "List the outputs."},
            {"type": "ai", "id": "a1", "content": "",
             "tool_calls": [{"id": "c1", "name": "ls", "args": {"description": "look", "path": "/mnt/user-data/outputs"}}],
             "usage_metadata": {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}},
            {"type": "tool", "id": "t1", "content": "/mnt/user-data/outputs/report.md", "name": "ls",
             "tool_call_id": "c1", "status": "success"},
            {"type": "human", "id": "h2", "content": "<system-reminder>2025-01-01</system-reminder>",
             "additional_kwargs": {"hide_from_ui": true, "dynamic_context_reminder": true}},
            {"type": "ai", "id": "a2", "content": [{"type": "text", "text": "Done."}]}
        ],
        "title": "Outputs",
        "artifacts": ["/mnt/user-data/outputs/report.md"],
        "todos": [{"content": "list", "status": "completed"}],
        "uploaded_files": [{"filename": "a.txt", "size": 3}],
        "viewed_images": {"/mnt/user-data/uploads/a.png": {"mime_type": "image/png", "size": 10}},
        "thread_data": {
            "workspace_path": "/data/threads/t/user-data/workspace",
            "uploads_path": "/data/threads/t/user-data/uploads",
            "outputs_path": "/data/threads/t/user-data/outputs"
        },
        "sandbox": {"sandbox_id": "local:u:t"},
        "custom_key": {"kept": true}
    }))
    .unwrap();
    insta::assert_json_snapshot!("full_thread_state", state);
}
