//! An MCP `CallToolResult` as an antler tool result (spec 50 §4.17).
//!
//! Read from the result's wire JSON (the MCP schema), so rmcp's Rust types for content may
//! change without touching the mapping:
//! - `text` → text; all-text results become one string (blocks joined by newlines);
//! - `image` → an `image_url` block with a data URL (vision models see it; others get the text);
//! - `audio` → an `audio` block; `resource_link` → a text line naming the link (so every model
//!   sees it); embedded `resource` → its text, or an image / `file` block for a blob;
//! - `isError` → an error tool message with the text parts;
//! - `structuredContent` → `artifact.structured_content` (and the text, when the server sent
//!   no content blocks).
//!
//! Local file references in text and links (absolute paths, `file://` URIs, paths relative to
//! a stdio server's cwd) become `/mnt/user-data/...` when they resolve to an existing file
//! inside the thread's user-data folder; anything else is left as it is.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use antler_protocol::{Content, Object, ToolStatus};
use antler_runtime::ToolOutput;
use regex::Regex;
use serde_json::{json, Value};

/// Where a result's file references may point.
#[derive(Clone, Debug, Default)]
pub struct Rewrite {
    /// The thread's `user-data` folder (canonical), when known.
    pub user_data: Option<PathBuf>,
    /// The server process's cwd, for relative references (stdio only).
    pub base_dir: Option<PathBuf>,
}

const VIRTUAL_ROOT: &str = "/mnt/user-data";

fn path_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // DeerFlow's pattern: absolute paths / file:// URIs, or ./, ../, dir/ relative paths.
        #[allow(clippy::expect_used)] // a constant pattern
        Regex::new(r#"(?:file://)?/[^\s'"<>|*?]+|(?:\.{0,2}/|[\w.-]+/)[^\s'"<>|*?]+"#)
            .expect("valid regex")
    })
}

const TRAILING: &[char] = &[
    '.', ',', ';', ':', '!', '?', ')', ']', '}', '>', '"', '\'', '`',
];

impl Rewrite {
    /// The virtual path of a local file reference, when it names an existing file inside the
    /// thread's user-data folder.
    pub fn virtual_path(&self, reference: &str) -> Option<String> {
        let root = self.user_data.as_deref()?;
        let raw = if let Some(rest) = reference.strip_prefix("file://") {
            percent_decode(rest)
        } else if reference.contains("://") || reference.starts_with("data:") {
            return None;
        } else {
            reference.to_owned()
        };
        if raw.is_empty() {
            return None;
        }
        let p = Path::new(&raw);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.as_deref()?.join(p)
        };
        let real = std::fs::canonicalize(&p).ok()?;
        if !real.is_file() {
            return None;
        }
        let rel = real.strip_prefix(root).ok()?;
        Some(format!("{VIRTUAL_ROOT}/{}", rel.to_string_lossy()))
    }

    /// Rewrite every reference in free text that resolves inside the thread.
    pub fn text(&self, text: &str) -> String {
        if self.user_data.is_none() || !text.contains('/') {
            return text.to_owned();
        }
        path_regex()
            .replace_all(text, |caps: &regex::Captures<'_>| {
                let token = &caps[0];
                let stripped = token.trim_end_matches(TRAILING);
                let trailing = &token[stripped.len()..];
                match self.virtual_path(stripped) {
                    Some(v) => format!("{v}{trailing}"),
                    None => token.to_owned(),
                }
            })
            .into_owned()
    }

    fn link(&self, uri: &str) -> String {
        self.virtual_path(uri).unwrap_or_else(|| uri.to_owned())
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn str_field<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn mime(v: &Value) -> Option<&str> {
    str_field(v, "mimeType").filter(|m| !m.is_empty())
}

fn image_block(data: &str, mime: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}})
}

/// Map a `CallToolResult` (as JSON) to a tool output.
pub fn to_output(result: &Value, rewrite: &Rewrite) -> ToolOutput {
    let mut blocks: Vec<Value> = Vec::new();
    let items = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for item in items {
        let text_block = |t: String| json!({"type": "text", "text": t});
        match str_field(item, "type").unwrap_or("") {
            "text" => blocks.push(text_block(
                rewrite.text(str_field(item, "text").unwrap_or("")),
            )),
            "image" => {
                let data = str_field(item, "data").unwrap_or("");
                blocks.push(image_block(data, mime(item).unwrap_or("image/png")));
            }
            "audio" => blocks.push(json!({
                "type": "audio",
                "base64": str_field(item, "data").unwrap_or(""),
                "mime_type": mime(item),
            })),
            "resource_link" => {
                let uri = rewrite.link(str_field(item, "uri").unwrap_or(""));
                let name = str_field(item, "name").unwrap_or("");
                let mut line = format!("Resource link: {name} ({uri})");
                if let Some(m) = mime(item) {
                    line.push_str(&format!(" [{m}]"));
                }
                if let Some(d) = str_field(item, "description").filter(|d| !d.is_empty()) {
                    line.push_str(&format!(": {d}"));
                }
                blocks.push(text_block(line));
            }
            "resource" => {
                let res = item.get("resource").unwrap_or(&Value::Null);
                if let Some(t) = str_field(res, "text") {
                    blocks.push(text_block(rewrite.text(t)));
                } else if let Some(b) = str_field(res, "blob") {
                    match mime(res) {
                        Some(m) if m.starts_with("image/") => blocks.push(image_block(b, m)),
                        m => blocks.push(json!({
                            "type": "file",
                            "base64": b,
                            "mime_type": m,
                            "uri": str_field(res, "uri").map(|u| rewrite.link(u)),
                        })),
                    }
                } else {
                    blocks.push(text_block(res.to_string()));
                }
            }
            _ => blocks.push(text_block(item.to_string())),
        }
    }
    let structured = result
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .cloned();
    if blocks.is_empty() {
        if let Some(s) = &structured {
            blocks.push(json!({"type": "text", "text": s.to_string()}));
        }
    }
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| str_field(b, "type") == Some("text"))
        .filter_map(|b| str_field(b, "text"))
        .collect();
    if is_error {
        let msg = if texts.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            texts.join("\n")
        };
        return ToolOutput::error(msg);
    }
    let content = if texts.len() == blocks.len() {
        Content::Text(texts.join("\n"))
    } else {
        Content::Blocks(blocks)
    };
    let artifact = match structured {
        Some(s) => json!({"structured_content": s}),
        None => Value::Null,
    };
    ToolOutput::Content {
        content,
        status: ToolStatus::Success,
        artifact,
        additional_kwargs: Object::new(),
    }
}
