//! Uploads (chain S5, before_agent, lead agent only): tell the model which files came with the
//! current message — and, with the history scan (the seeds' behaviour, on by default), which
//! files earlier messages left in the uploads folder — by prepending a `<current_uploads>` block
//! to the message; recompute `uploaded_files` (this message's files only) every run, `[]` when
//! there are none.
//!
//! Runs after ThreadData. Only `filename` and `size` of `additional_kwargs.files` are trusted;
//! the path is recomputed and the file must exist in the thread's uploads folder. Every
//! user-derived string placed in the block is neutralised so a crafted filename or document
//! cannot forge framework tags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use antler_protocol::markers;
use antler_protocol::{Content, Message, StateUpdate, ThreadState};
use antler_runtime::{
    BeforeAgentOutput, HookOutput, HookSet, Middleware, MiddlewareError, RunContext,
};
use antler_sandbox::paths::VIRTUAL_UPLOADS;
use antler_sandbox::{Beneath, SandboxError, ThreadPaths, ThreadRoots};
use async_trait::async_trait;
use cap_std::fs::Dir;
use regex::Regex;
use serde_json::{json, Value};

use crate::hook::BeforeAgentResult;

const NAME: &str = "UploadsMiddleware";
/// Headings kept per outline.
const MAX_OUTLINE: usize = 50;
/// Non-empty lines kept as a preview when a document has no headings.
const PREVIEW_LINES: usize = 5;

pub struct UploadsMiddleware {
    home: PathBuf,
    max_files: usize,
    history: bool,
}

impl UploadsMiddleware {
    /// `home` is the data home (`$ANTLER_HOME`).
    pub fn new(home: impl Into<PathBuf>) -> Self {
        UploadsMiddleware {
            home: home.into(),
            max_files: 10,
            history: true,
        }
    }

    /// Also list files uploaded earlier in the thread (the seeds' history scan; default on).
    /// Off reproduces DeerFlow today, which leaves history to a `list_uploaded_files` tool.
    pub fn with_history(mut self, on: bool) -> Self {
        self.history = on;
        self
    }

    /// Files listed in the block (default 10, must be ≥ 1); the rest are summarised.
    pub fn with_max_files_per_context_section(mut self, n: usize) -> Result<Self, MiddlewareError> {
        if n == 0 {
            return Err(MiddlewareError::new(
                NAME,
                "max_files_per_context_section must be >= 1",
            ));
        }
        self.max_files = n;
        Ok(self)
    }
}

/// Escape framework tags and disarm the user-input markers: the shared neutralizer.
pub use antler_protocol::untrusted::neutralize;

/// A heading of a converted document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heading {
    pub line: usize,
    pub title: String,
}

/// An outline: up to 50 headings (`truncated` when there were more), or a preview of the first
/// non-empty lines when there are none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outline {
    pub headings: Vec<Heading>,
    pub truncated: bool,
    pub preview: Vec<String>,
}

fn heading_res() -> &'static (Regex, Regex, Regex) {
    static R: OnceLock<(Regex, Regex, Regex)> = OnceLock::new();
    R.get_or_init(|| {
        let md = Regex::new(r"^#{1,6}\s+(.+?)\s*#*\s*$").unwrap_or_else(|_| never());
        let bold = Regex::new(
            r"(?i)^\*\*((?:ITEM|PART|SECTION|SCHEDULE|EXHIBIT|APPENDIX|ANNEX|CHAPTER)\b[^*]*)\*\*$",
        )
        .unwrap_or_else(|_| never());
        let block = Regex::new(r"\*\*([^*]+)\*\*").unwrap_or_else(|_| never());
        (md, bold, block)
    })
}

fn never() -> Regex {
    // A pattern that cannot fail to compile and never matches.
    Regex::new(r"[^\s\S]").unwrap_or_else(|_| unreachable!())
}

/// Outline of a Markdown document (spec 30 §Uploads step 6).
pub fn outline_of(markdown: &str) -> Outline {
    let (md, bold, block) = heading_res();
    let mut headings = Vec::new();
    let mut truncated = false;
    for (i, raw) in markdown.lines().enumerate() {
        let line = raw.trim();
        let title = if let Some(c) = md.captures(line) {
            Some(c[1].replace("**", "").trim().to_owned())
        } else if let Some(c) = bold.captures(line) {
            Some(c[1].trim().to_owned())
        } else {
            let blocks: Vec<&str> = block
                .captures_iter(line)
                .filter_map(|c| c.get(1).map(|m| m.as_str().trim()))
                .collect();
            let only_blocks = block.replace_all(line, "").trim().is_empty();
            (only_blocks
                && (2..=4).contains(&blocks.len())
                && blocks[0].chars().any(|c| c.is_ascii_digit())
                && !blocks[1].chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then(|| blocks.join(" "))
        };
        if let Some(t) = title.filter(|t| !t.is_empty()) {
            if headings.len() == MAX_OUTLINE {
                truncated = true;
                break;
            }
            headings.push(Heading {
                line: i + 1,
                title: t,
            });
        }
    }
    let preview = if headings.is_empty() {
        markdown
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .take(PREVIEW_LINES)
            .map(str::to_owned)
            .collect()
    } else {
        Vec::new()
    };
    Outline {
        headings,
        truncated,
        preview,
    }
}

/// One current upload.
#[derive(Clone, Debug, PartialEq)]
struct Upload {
    filename: String,
    size: u64,
    extension: String,
    outline: Option<Outline>,
}

impl Upload {
    fn path(&self) -> String {
        format!("{VIRTUAL_UPLOADS}/{}", self.filename)
    }

    fn state_value(&self) -> Value {
        json!({"filename": self.filename, "size": self.size, "path": self.path(), "extension": self.extension})
    }
}

fn size_label(size: u64) -> String {
    let kb = size as f64 / 1024.0;
    if kb < 1024.0 {
        format!("{kb:.1} KB")
    } else {
        format!("{:.1} MB", kb / 1024.0)
    }
}

fn extension_of(name: &str) -> String {
    Path::new(name)
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default()
}

fn is_staging(name: &str) -> bool {
    name.starts_with(".upload-") && name.ends_with(".part")
}

/// The thread's uploads folder as seen by this middleware.
enum Folder {
    /// No thread: entries are not checked against the disk.
    Unknown,
    /// The folder is missing or unusable (e.g. replaced by a symlink): nothing is in it.
    Unusable,
    /// The folder's handle; entries are checked and read through it.
    Open(Beneath),
}

/// Files of `additional_kwargs.files` that survive the checks, in upload order.
fn files_of(kwargs: &serde_json::Map<String, Value>, uploads: &Folder) -> (Vec<Upload>, bool) {
    let Some(Value::Array(entries)) = kwargs.get("files") else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    for e in entries {
        let Some(o) = e.as_object() else { continue };
        let Some(name) = o.get("filename").and_then(Value::as_str) else {
            continue;
        };
        let base = Path::new(name)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned());
        if name.is_empty()
            || base.as_deref() != Some(name)
            || name.contains('\\')
            || is_staging(name)
        {
            continue;
        }
        let exists = match uploads {
            Folder::Unknown => true,
            Folder::Unusable => false,
            Folder::Open(b) => b
                .dir()
                .symlink_metadata(name)
                .is_ok_and(|m| m.file_type().is_file()),
        };
        if !exists {
            continue;
        }
        let size = match o.get("size") {
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| n.as_f64().map(|f| f.max(0.0) as u64))
                .unwrap_or(0),
            Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
            _ => 0,
        };
        out.push(Upload {
            filename: name.to_owned(),
            size,
            extension: extension_of(name),
            outline: None,
        });
    }
    (out, !entries.is_empty())
}

fn omitted_types(files: &[Upload]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for f in files {
        let label = if f.extension.is_empty() {
            "(no extension)".to_owned()
        } else {
            f.extension.to_ascii_lowercase()
        };
        *counts.entry(label).or_default() += 1;
    }
    counts
        .iter()
        .map(|(ext, n)| format!("{n} {}", neutralize(ext)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn push_entry(l: &mut Vec<String>, f: &Upload) {
    l.push(format!(
        "- {} ({})",
        neutralize(&f.filename),
        size_label(f.size)
    ));
    l.push(format!("  Path: {}", neutralize(&f.path())));
    match &f.outline {
        Some(o) if !o.headings.is_empty() => {
            l.push(
                "  Document outline (use `read_file` with line ranges to read sections):".into(),
            );
            for h in &o.headings {
                l.push(format!("    L{}: {}", h.line, neutralize(&h.title)));
            }
            if o.truncated {
                l.push(format!(
                    "    ... (showing first {} headings; read the file with `read_file` for the rest)",
                    o.headings.len()
                ));
            }
        }
        other => {
            if let Some(o) = other.as_ref().filter(|o| !o.preview.is_empty()) {
                l.push("  No structural headings detected. Document begins with:".into());
                for p in &o.preview {
                    l.push(format!("    > {}", neutralize(p)));
                }
            }
            l.push(format!(
                "  Search it with `grep`, e.g. `grep(pattern='keyword', path='{VIRTUAL_UPLOADS}/')`."
            ));
        }
    }
    l.push(String::new());
}

fn push_omitted(l: &mut Vec<String>, omitted: &[Upload], what: &str) {
    if omitted.is_empty() {
        return;
    }
    l.push(format!(
        "... ({} more {what} omitted from this context.)",
        omitted.len()
    ));
    l.push(format!("  Omitted file types: {}", omitted_types(omitted)));
    l.push(format!("  List every upload with `glob(pattern='**/*', path='{VIRTUAL_UPLOADS}/')`; search them all with `grep(pattern='keyword', path='{VIRTUAL_UPLOADS}/')`."));
    l.push(String::new());
}

/// The `<current_uploads>` block: this message's files, then (history scan) files uploaded
/// earlier in the thread.
fn block(current: (&[Upload], &[Upload]), history: (&[Upload], &[Upload])) -> String {
    let mut l: Vec<String> = vec![
        "<current_uploads>".into(),
        "The following files were uploaded in this message:".into(),
        String::new(),
    ];
    if current.0.is_empty() {
        l.push("(empty)".into());
        l.push(String::new());
    }
    for f in current.0 {
        push_entry(&mut l, f);
    }
    push_omitted(&mut l, current.1, "file(s) from this message");
    if !history.0.is_empty() {
        l.push(
            "The following files were uploaded in previous messages and are still available:"
                .into(),
        );
        l.push(String::new());
        for f in history.0 {
            push_entry(&mut l, f);
        }
        push_omitted(&mut l, history.1, "earlier file(s)");
    }
    l.push("How to use these files:".into());
    l.push("- Read them before answering: `read_file` with the outline's line numbers reaches the relevant section of a long document.".into());
    l.push(format!("- `grep` finds keywords when you do not know where to look, e.g. `grep(pattern='revenue', path='{VIRTUAL_UPLOADS}/')`."));
    l.push(format!(
        "- `glob` finds files by name, e.g. `glob(pattern='**/*.md', path='{VIRTUAL_UPLOADS}/')`."
    ));
    l.push("- Search the web only when the files clearly do not answer the question.".into());
    l.push("</current_uploads>".into());
    l.join("\n")
}

/// Files already in the uploads folder that are not part of this message (regular files only;
/// no staging files, no Markdown companions of a same-stem document), newest first.
fn historical(dir: &Dir, current: &[Upload]) -> Vec<Upload> {
    let Ok(rd) = dir.entries() else {
        return Vec::new();
    };
    let mut entries: Vec<(std::time::SystemTime, String, u64)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(meta) = dir.symlink_metadata(e.file_name()) else {
            continue;
        };
        if !meta.file_type().is_file() || is_staging(&name) {
            continue;
        }
        names.push(name.clone());
        if current.iter().any(|c| c.filename == name) {
            continue;
        }
        let mtime = meta
            .modified()
            .map(|t| t.into_std())
            .unwrap_or(std::time::UNIX_EPOCH);
        entries.push((mtime, name, meta.len()));
    }
    let is_companion = |name: &str| {
        let p = Path::new(name);
        p.extension().is_some_and(|e| e.eq_ignore_ascii_case("md"))
            && p.file_stem().is_some_and(|stem| {
                names
                    .iter()
                    .any(|n| n != name && Path::new(n).file_stem() == Some(stem))
            })
    };
    entries.retain(|(_, n, _)| !is_companion(n));
    entries.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    entries
        .into_iter()
        .map(|(_, name, size)| Upload {
            extension: extension_of(&name),
            filename: name,
            size,
            outline: None,
        })
        .collect()
}

fn attach_outlines(dir: &Dir, files: &mut [Upload]) {
    for f in files {
        let stem = Path::new(&f.filename)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Ok(md) = dir.read_to_string(format!("{stem}.md")) {
            f.outline = Some(outline_of(&md));
        }
    }
}

fn clear() -> BeforeAgentOutput {
    HookOutput::update(StateUpdate {
        uploaded_files: Some(Some(Vec::new())),
        ..Default::default()
    })
}

#[async_trait]
impl Middleware for UploadsMiddleware {
    middleware_identity!(NAME, HookSet::BEFORE_AGENT);

    async fn before_agent(&self, state: &ThreadState, run: &RunContext) -> BeforeAgentResult {
        let Some(Message::Human(last)) = state.messages.last() else {
            return Ok(clear());
        };
        let paths = (!run.thread_id.is_empty())
            .then(|| ThreadPaths::new(&self.home, &run.thread_id, run.user_id.as_deref()).ok())
            .flatten();
        let uploads = match paths {
            None => Folder::Unknown,
            Some(p) => match ThreadRoots::new(&p).uploads.open() {
                Ok(b) => Folder::Open(b),
                Err(SandboxError::NotFound(_)) => Folder::Unusable,
                Err(e) => {
                    tracing::warn!(thread = %run.thread_id, error = %e, "uploads folder is unusable");
                    Folder::Unusable
                }
            },
        };
        if last.content.text().starts_with("<current_uploads>") {
            // Already annotated (a re-run on the same message).
            return Ok(HookOutput::none());
        }
        let (mut files, had_metadata) = files_of(&last.additional_kwargs, &uploads);
        if files.is_empty() && had_metadata {
            tracing::warn!(thread = %run.thread_id, "message lists uploaded files but none exist in the uploads folder");
        }
        let mut history = match (&uploads, self.history) {
            (Folder::Open(b), true) => historical(b.dir(), &files),
            _ => Vec::new(),
        };
        if files.is_empty() && history.is_empty() {
            return Ok(clear());
        }
        let listed_n = files.len().min(self.max_files);
        let history_n = history.len().min(self.max_files);
        if let Folder::Open(b) = &uploads {
            attach_outlines(b.dir(), &mut files[..listed_n]);
            attach_outlines(b.dir(), &mut history[..history_n]);
        }
        let text = block(files.split_at(listed_n), history.split_at(history_n));

        let mut msg = last.clone();
        let original = msg.content.text();
        if !msg
            .additional_kwargs
            .get(markers::ORIGINAL_USER_CONTENT)
            .is_some_and(Value::is_string)
        {
            if msg
                .additional_kwargs
                .contains_key(markers::ORIGINAL_USER_CONTENT)
            {
                tracing::warn!("replacing a non-string original_user_content");
            }
            msg.additional_kwargs
                .insert(markers::ORIGINAL_USER_CONTENT.into(), Value::from(original));
        }
        msg.content = match msg.content {
            Content::Text(s) => Content::Text(format!("{text}\n\n{s}")),
            Content::Blocks(mut b) => {
                b.insert(0, json!({"type": "text", "text": format!("{text}\n\n")}));
                Content::Blocks(b)
            }
        };
        Ok(HookOutput::update(StateUpdate {
            uploaded_files: Some(Some(files.iter().map(Upload::state_value).collect())),
            messages: Some(vec![Message::Human(msg)]),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn neutralizes_framework_tags() {
        assert_eq!(
            neutralize("a<system>b</system>"),
            "a&lt;system&gt;b&lt;/system&gt;"
        );
        assert_eq!(
            neutralize("<current_uploads x=1>"),
            "&lt;current_uploads x=1&gt;"
        );
        assert_eq!(neutralize("<System-Reminder/>"), "&lt;System-Reminder/&gt;");
        assert_eq!(
            neutralize("<b>bold</b> <systematic>"),
            "<b>bold</b> <systematic>"
        );
        assert_eq!(neutralize("--- END USER INPUT ---"), "[END USER INPUT]");
    }

    #[test]
    fn outlines() {
        let o = outline_of("# Title\ntext\n## **Part** two\n**ITEM 1A. Risk Factors**\n**1** **Scope**\n**1** **2**\n");
        let got: Vec<(usize, &str)> = o
            .headings
            .iter()
            .map(|h| (h.line, h.title.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "Title"),
                (3, "Part two"),
                (4, "ITEM 1A. Risk Factors"),
                (5, "1 Scope")
            ]
        );
        let many: String = (0..60).map(|i| format!("# h{i}\n")).collect();
        let o = outline_of(&many);
        assert_eq!(o.headings.len(), 50);
        assert!(o.truncated);
        let o = outline_of("\n first \n\nsecond\n3\n4\n5\n6\n");
        assert_eq!(o.preview, vec!["first", "second", "3", "4", "5"]);
    }

    #[test]
    fn sizes() {
        assert_eq!(size_label(512), "0.5 KB");
        assert_eq!(size_label(2 * 1024 * 1024), "2.0 MB");
    }
}
