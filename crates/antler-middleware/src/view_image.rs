//! ViewImage (chain L10, vision models only; before_model, after_model): show the model the
//! images its `view_image` calls looked at (spec 30 "ViewImageMiddleware", spec 50 §4.10).
//!
//! `view_image` records only metadata in `viewed_images` (path → `{mime_type, size,
//! actual_path}`). Before a model call that follows a turn whose `view_image` calls are all
//! answered, this middleware reads the files *now* and injects one hidden human message with
//! their bytes as `data:` URLs (id `view-image-context:<uuid hex>`, marker
//! `deerflow_view_image_context: true`) — once per turn: an image context (or the legacy header
//! text) already after that turn suppresses it. After the model call the marked message is
//! removed again, so base64 never stays in the thread's messages or later checkpoints. A client
//! message that merely reuses the id prefix without the marker is never touched.
//!
//! Both hooks look only at the messages since the last AI message (before_model) or the previous
//! one (after_model): O(new messages) per step. `viewed_images` is never cleared here (the
//! reducer's `{}` clear rule stays available to others), so a later turn resends every image
//! viewed in the thread, as DeerFlow does.
//!
//! `viewed_images` is state, so its `actual_path`s are not trusted: only a file inside the run's
//! own `user-data` folder (derived from the data home and the run's user and thread, symlinks
//! resolved) is read. Anything else — another thread's image, `/etc/…` — is reported as
//! unavailable and never read.

use std::io::Read;
use std::path::{Path, PathBuf};

use antler_protocol::markers;
use antler_protocol::{
    AiMessage, Content, HumanMessage, Message, Object, StateUpdate, ThreadState,
};
use antler_runtime::{HookOutput, HookSet, Middleware, MiddlewareError, RunContext};
use antler_sandbox::beneath::Beneath;
use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::hook::HookResult;

const NAME: &str = "ViewImageMiddleware";

/// Largest image injected (the tool's cap, re-checked at read time).
pub const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
/// Id prefix of the injected message.
pub const CONTEXT_ID_PREFIX: &str = "view-image-context:";
/// `additional_kwargs` marker of the injected message (must be `true`).
pub const CONTEXT_MARKER_KEY: &str = markers::VIEW_IMAGE_CONTEXT;
/// First text block of the injected message.
pub const HEADER_TEXT: &str = "Here are the images you've viewed:";
/// The only block when nothing was viewed.
pub const NO_IMAGES_TEXT: &str = "No images have been viewed.";
/// Header texts of injected messages from earlier versions (also suppress a new injection).
const LEGACY_HEADERS: [&str; 2] = [
    "Here are the images you've viewed",
    "Here are the details of the images you've viewed",
];

/// Injects viewed images before the model call and removes them after it.
#[derive(Debug)]
pub struct ViewImageMiddleware {
    home: PathBuf,
}

impl ViewImageMiddleware {
    /// `home` is the data home (`$ANTLER_HOME`): images are read only from the run's own
    /// thread folders under it.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        ViewImageMiddleware { home: home.into() }
    }
}

/// An injected image context: id prefix **and** the marker set to `true`.
pub fn is_image_context(m: &Message) -> bool {
    matches!(m, Message::Human(_))
        && m.id().is_some_and(|id| id.starts_with(CONTEXT_ID_PREFIX))
        && m.additional_kwargs().get(CONTEXT_MARKER_KEY) == Some(&Value::Bool(true))
}

fn has_legacy_header(content: &Content) -> bool {
    let hit = |s: &str| LEGACY_HEADERS.iter().any(|h| s.contains(h));
    match content {
        Content::Text(s) => hit(s),
        Content::Blocks(blocks) => blocks.iter().any(|b| match b {
            Value::String(s) => hit(s),
            Value::Object(o) => o.get("text").and_then(Value::as_str).is_some_and(hit),
            _ => false,
        }),
    }
}

fn calls_view_image(ai: &AiMessage) -> bool {
    ai.tool_calls.iter().any(|c| c.name == "view_image")
}

/// Whether an image context should be injected now: the last AI message called `view_image`,
/// every call of it with an id is answered by a tool message after it, and no image context (or
/// legacy header) follows it yet. Looks only at the messages from that AI message on.
pub fn should_inject(messages: &[&Message]) -> bool {
    let Some(pos) = messages.iter().rposition(|m| matches!(m, Message::Ai(_))) else {
        return false;
    };
    let Some(Message::Ai(ai)) = messages.get(pos).copied() else {
        return false;
    };
    if !calls_view_image(ai) {
        return false;
    }
    let after = &messages[pos + 1..];
    let answered = |id: &str| {
        after
            .iter()
            .any(|m| matches!(m, Message::Tool(t) if t.tool_call_id == id))
    };
    let complete = ai
        .tool_calls
        .iter()
        .filter_map(|c| c.id.as_deref().filter(|id| !id.is_empty()))
        .all(answered);
    if !complete {
        return false;
    }
    !after.iter().any(|m| match m {
        Message::Human(h) => is_image_context(m) || has_legacy_header(&h.content),
        _ => false,
    })
}

/// The tail of `state`'s messages from the last AI message on (all of them when there is none).
fn since_last_ai(state: &ThreadState) -> Vec<&Message> {
    let n = state.messages.len();
    let back = state
        .messages
        .iter()
        .rev()
        .position(|m| matches!(m, Message::Ai(_)))
        .map_or(n, |p| p + 1);
    (n - back..n)
        .filter_map(|i| state.messages.get(i))
        .collect()
}

/// Standard base64 with padding (data URLs).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The file as a `data:` URL, or `None` when it is missing, not under `root`, reached through a
/// symlink leading out of `root` (it is opened beneath a handle of `root`, so a folder swapped
/// since `view_image` looked cannot redirect the read), not a regular file, no longer the
/// recorded size, over [`MAX_IMAGE_BYTES`] or unreadable.
pub fn read_data_url(
    actual_path: &str,
    mime_type: &str,
    expected_size: u64,
    root: &Path,
) -> Option<String> {
    let actual = Path::new(actual_path);
    let canonical_root = std::fs::canonicalize(root).ok();
    let rel = actual.strip_prefix(root).ok().or_else(|| {
        canonical_root
            .as_deref()
            .and_then(|r| actual.strip_prefix(r).ok())
    });
    let Some(rel) = rel.filter(|r| !r.as_os_str().is_empty()) else {
        tracing::warn!(
            actual_path,
            "viewed image outside the run's thread folders; not read"
        );
        return None;
    };
    let mut f = Beneath::ambient(root).ok()?.open(rel).ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() != expected_size || meta.len() > MAX_IMAGE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    (&mut f)
        .take(MAX_IMAGE_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 != expected_size {
        return None;
    }
    Some(format!("data:{mime_type};base64,{}", base64(&bytes)))
}

/// Content blocks describing every viewed image, with the bytes read from disk now — only from
/// files under `root` (the run's own `user-data` folder).
pub fn image_blocks(viewed: &Map<String, Value>, root: &Path) -> Vec<Value> {
    if viewed.is_empty() {
        return vec![json!({"type": "text", "text": NO_IMAGES_TEXT})];
    }
    let mut blocks = vec![json!({"type": "text", "text": HEADER_TEXT})];
    for (virtual_path, data) in viewed {
        let field = |k: &str| data.get(k);
        let mime = field("mime_type")
            .and_then(Value::as_str)
            .unwrap_or("unknown");
        let actual = field("actual_path").and_then(Value::as_str).unwrap_or("");
        let size = field("size").and_then(Value::as_u64).unwrap_or(0);
        blocks.push(json!({"type": "text", "text": format!("\n- **{virtual_path}** ({mime})")}));
        if actual.is_empty() {
            continue;
        }
        match read_data_url(actual, mime, size, root) {
            Some(url) => blocks.push(json!({"type": "image_url", "image_url": {"url": url}})),
            None => blocks.push(json!({
                "type": "text",
                "text": format!("  (file unavailable or changed on disk: {actual})"),
            })),
        }
    }
    blocks
}

/// The hidden human message carrying `blocks`.
pub fn image_context_message(blocks: Vec<Value>) -> Message {
    let mut kwargs = Object::new();
    markers::mark_hidden(&mut kwargs);
    kwargs.insert(CONTEXT_MARKER_KEY.into(), Value::Bool(true));
    Message::Human(HumanMessage {
        content: Content::Blocks(blocks),
        additional_kwargs: kwargs.into(),
        id: Some(format!(
            "{CONTEXT_ID_PREFIX}{}",
            uuid::Uuid::new_v4().simple()
        )),
        ..Default::default()
    })
}

#[async_trait]
impl Middleware for ViewImageMiddleware {
    middleware_identity!(NAME, HookSet::BEFORE_MODEL | HookSet::AFTER_MODEL, deferrable: HookSet::BEFORE_MODEL | HookSet::AFTER_MODEL);

    async fn before_model(&self, state: &ThreadState, run: &RunContext) -> HookResult {
        if !should_inject(&since_last_ai(state)) {
            return Ok(HookOutput::none());
        }
        let root =
            antler_sandbox::ThreadPaths::new(&self.home, &run.thread_id, run.user_id.as_deref())
                .map_err(|e| MiddlewareError::new(NAME, e.to_string()))?
                .user_data;
        // Reading and encoding up to 20 MiB per image is blocking work: keep it off the runtime.
        let viewed = state.viewed_images.clone();
        let blocks = tokio::task::spawn_blocking(move || image_blocks(&viewed, &root))
            .await
            .map_err(|e| MiddlewareError::new(NAME, format!("reading images failed: {e}")))?;
        tracing::debug!(
            images = state.viewed_images.len(),
            "injecting viewed images before the model call"
        );
        Ok(HookOutput::update(StateUpdate::message(
            image_context_message(blocks),
        )))
    }

    /// Remove the image contexts the call just consumed: every marked message since the AI
    /// message before the new one (which also catches one left behind by an interrupted step).
    async fn after_model(&self, state: &ThreadState, _run: &RunContext) -> HookResult {
        let mut removals = Vec::new();
        for (i, m) in state.messages.iter().rev().enumerate() {
            if i > 0 && matches!(m, Message::Ai(_)) {
                break;
            }
            if is_image_context(m) {
                if let Some(id) = m.id() {
                    removals.push(Message::remove(id));
                }
            }
        }
        if removals.is_empty() {
            return Ok(HookOutput::none());
        }
        removals.reverse();
        Ok(HookOutput::update(StateUpdate::messages(removals)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }
}
