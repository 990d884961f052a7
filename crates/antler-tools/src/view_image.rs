//! `view_image` (spec 50 §4.10; vision models only): check an image in the thread folders and
//! record its metadata in `viewed_images` — never its bytes. The ViewImage middleware attaches
//! the image to the next model request.

use std::io::Read;

use antler_protocol::{Message, Object, StateUpdate, ToolMessage};
use antler_runtime::{Command, ToolContext, ToolError, ToolOutput, TypedSpec, TypedTool};
use antler_sandbox::paths::{VIRTUAL_OUTPUTS, VIRTUAL_UPLOADS, VIRTUAL_WORKSPACE};
use antler_sandbox::{LocalPolicy, SandboxError};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::env::{Fail, ToolEnv};

/// Largest image accepted (20 MiB).
pub const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;
const EXTENSIONS: &[&str] = &[".jpg", ".jpeg", ".png", ".webp", ".gif"];

/// `view_image` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Args {
    /// Absolute path of the image, under /mnt/user-data/workspace, /mnt/user-data/uploads or /mnt/user-data/outputs.
    image_path: String,
}

pub struct ViewImageTool {
    spec: TypedSpec<Args>,
    env: ToolEnv,
}

/// The format the bytes say, as a MIME type.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
        Some("image/png")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else {
        None
    }
}

fn mime_for_ext(ext: &str) -> &'static str {
    match ext {
        ".png" => "image/png",
        ".webp" => "image/webp",
        ".gif" => "image/gif",
        _ => "image/jpeg",
    }
}

impl ViewImageTool {
    pub fn new(env: ToolEnv) -> ViewImageTool {
        ViewImageTool {
            spec: TypedSpec::new(
                "view_image",
                "Look at an image file (JPEG, PNG, WebP or GIF, up to 20 MB) from the thread's workspace, uploads or outputs. The image is shown to you on your next turn.",
            ),
            env,
        }
    }

    fn check(&self, path: &str, ctx: &ToolContext<'_>) -> Result<(String, u64, String), String> {
        let allowed = [VIRTUAL_WORKSPACE, VIRTUAL_UPLOADS, VIRTUAL_OUTPUTS];
        if !allowed.iter().any(|a| path.starts_with(&format!("{a}/"))) {
            return Err(format!(
                "Only image paths under {} are allowed",
                allowed.join(", ")
            ));
        }
        // The run's own folders (from its sandbox), never `thread_data` from state.
        let paths = crate::env::thread_paths(&self.env, ctx).map_err(Fail::detail)?;
        let policy =
            LocalPolicy::for_paths(&paths, &self.env.settings).map_err(|e| e.to_string())?;
        policy
            .validate_tool_path(path, true)
            .map_err(|e| e.to_string())?;
        let host = policy.resolve_user_data(path).map_err(|e| e.to_string())?;
        // Opened through the thread folder handles: a folder swapped for a symlink is refused.
        let file = match policy.open_user_data(path) {
            Ok(f) => f,
            Err(SandboxError::NotFound(_)) => return Err(format!("Image file not found: {path}")),
            Err(e) => return Err(policy.mask(&e.to_string())),
        };
        let meta = file
            .metadata()
            .map_err(|e| policy.mask(&format!("OSError: {e}")))?;
        if !meta.is_file() {
            return Err(format!("Path is not a file: {path}"));
        }
        let ext = host
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy().to_ascii_lowercase()))
            .unwrap_or_default();
        if !EXTENSIONS.contains(&ext.as_str()) {
            return Err(format!(
                "Unsupported image format: {ext}. Supported formats: .jpg, .jpeg, .png, .webp, .gif"
            ));
        }
        if meta.len() > MAX_IMAGE_BYTES {
            return Err(format!(
                "Image file is too large: {} bytes. Maximum supported size is {MAX_IMAGE_BYTES} bytes",
                meta.len()
            ));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_IMAGE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| policy.mask(&format!("OSError: {e}")))?;
        if bytes.len() as u64 != meta.len() {
            return Err("Image file changed during read".to_owned());
        }
        let detected = sniff(&bytes)
            .ok_or_else(|| "File contents do not match a supported image format".to_owned())?;
        let expected = mime_for_ext(&ext);
        if detected != expected {
            return Err(format!(
                "Image contents are {detected}, but file extension indicates {expected}"
            ));
        }
        Ok((
            detected.to_owned(),
            meta.len(),
            host.to_string_lossy().into_owned(),
        ))
    }
}

#[async_trait]
impl TypedTool for ViewImageTool {
    type Args = Args;

    antler_runtime::typed_spec!(spec);

    async fn invoke(&self, a: Args, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let reply = |text: String, ok: bool| {
            let mut m = if ok {
                ToolMessage::new(ctx.call_id, text)
            } else {
                ToolMessage::error(ctx.call_id, text)
            };
            m.name = Some("view_image".to_owned());
            Message::Tool(m)
        };
        let update = match self.check(&a.image_path, &ctx) {
            Ok((mime, size, actual)) => {
                let mut viewed = Object::new();
                viewed.insert(
                    a.image_path.clone(),
                    json!({"mime_type": mime, "size": size, "actual_path": actual}),
                );
                StateUpdate {
                    viewed_images: Some(viewed),
                    messages: Some(vec![reply("Successfully read image".into(), true)]),
                    ..Default::default()
                }
            }
            Err(e) => StateUpdate::messages(vec![reply(format!("Error: {e}"), false)]),
        };
        Ok(ToolOutput::Command(Command { update, goto: None }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some("image/jpeg"));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(b"GIF89a.."), Some("image/gif"));
        assert_eq!(sniff(b"hello"), None);
    }
}
