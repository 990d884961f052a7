//! ToolOutputBudget (chain S2, wrap_tool + wrap_model): no single tool result may blow the model's
//! context (spec 40 part 2 §5.3, spec 60 §9, seed 002 experiment C).
//!
//! Among the outermost wrappers, so it sees each result after every inner wrapper (error
//! handling, sanitization) has shaped it. A result longer than its threshold is saved whole to
//! `{outputs}/.tool-results/{tool}-{12 hex}.{log|txt}` and replaced by a typed synopsis whose
//! first line is the receipt — `[Full {tool} output saved to /mnt/user-data/outputs/.tool-results/…
//! ({N} chars, ~{N/4} tokens).]` — so the model can `read_file` any slice of it. When the file
//! cannot be written, a head+tail cut (line-snapped, never longer than `fallback_max_chars`)
//! with an explicit omission marker takes its place. Either way the shortened message is what
//! enters state and the checkpoint; `additional_kwargs.tool_output_budget` records the receipt
//! (mode, path, original length and sha256) for UIs and audits, and the run journal gets a
//! `tool_output_budget` event.
//!
//! `wrap_model_call` cuts older oversized tool messages (from before the budget existed) in the
//! request only. It remembers how far it has checked the list, so a step costs O(new messages).
//!
//! `{outputs}` is the run's own outputs folder, derived from the data home and the run's (user,
//! thread) — never `thread_data` from state, which a client or an old checkpoint could point at
//! another thread's folder. Without a data home nothing is saved (inline cuts only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_protocol::{Content, Message, ToolMessage};
use antler_runtime::{
    HookSet, Middleware, ModelNext, ModelRequest, RunContext, RunEvent, RunKey, ToolCallRequest,
    ToolError, ToolNext, ToolOutcome,
};
use antler_sandbox::paths::VIRTUAL_USER_DATA;
use antler_sandbox::RootDir;
use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::hook::{ModelResult, ToolResult};

pub use synopsis::{build_synopsis, render_preview, Synopsis};

const NAME: &str = "ToolOutputBudgetMiddleware";
/// Where `/mnt/user-data/outputs` points for the model.
const VIRTUAL_OUTPUTS: &str = "/mnt/user-data/outputs";
/// `additional_kwargs` key of the receipt on a budgeted tool message.
pub const RECEIPT_KEY: &str = "tool_output_budget";
/// Run-context key: how far the history has been checked (see `wrap_model_call`).
const CHECKED_KEY: RunKey<Checked> = RunKey::new("ToolOutputBudgetMiddleware.checked");

/// The first `n` messages were checked (`id`: the id of the `n`-th); `over` are the indices of
/// tool messages among them that were over budget.
#[derive(Clone)]
struct Checked {
    n: usize,
    id: Option<String>,
    over: Vec<usize>,
}

/// `tool_output:` (spec 60 §9).
pub use antler_config::ToolOutputConfig;

/// The save threshold of `tool` (its override, else `externalize_min_chars`).
fn threshold(s: &ToolOutputConfig, tool: &str) -> usize {
    s.tool_overrides
        .get(tool)
        .copied()
        .unwrap_or(s.externalize_min_chars)
}

/// Smallest length that could trigger budgeting for `tool` (`None`: nothing ever does).
fn trigger(s: &ToolOutputConfig, tool: &str) -> Option<usize> {
    [threshold(s, tool), s.fallback_max_chars]
        .into_iter()
        .filter(|n| *n > 0)
        .min()
}

/// `storage_subdir` must be one plain directory name.
pub fn validate_storage_subdir(subdir: &str) -> Result<(), String> {
    if subdir.is_empty()
        || subdir == "."
        || subdir == ".."
        || subdir.contains('/')
        || subdir.contains('\\')
        || Path::new(subdir).is_absolute()
    {
        return Err(format!(
            "tool_output.storage_subdir must be a single directory name, got {subdir:?}"
        ));
    }
    Ok(())
}

pub struct ToolOutputBudgetMiddleware {
    settings: Arc<ToolOutputConfig>,
    home: Option<PathBuf>,
}

impl ToolOutputBudgetMiddleware {
    /// Without a data home (see [`Self::with_home`]) large results are cut inline only.
    pub fn new(settings: ToolOutputConfig) -> Self {
        ToolOutputBudgetMiddleware {
            settings: Arc::new(settings),
            home: None,
        }
    }

    /// Save large results in the run's outputs folder under `home` (`$ANTLER_HOME`).
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// The run's own outputs folder.
    fn outputs_of(&self, run: &RunContext) -> Option<PathBuf> {
        let home = self.home.as_ref()?;
        antler_sandbox::ThreadPaths::new(home, &run.thread_id, run.user_id.as_deref())
            .ok()
            .map(|p| p.outputs)
    }
}

// ---------------------------------------------------------------------------------------------
// Text helpers (lengths are in chars, as DeerFlow counts them)
// ---------------------------------------------------------------------------------------------

/// The text of a tool result: a string, or the newline-joined text of a list made only of text
/// parts. `None` for anything with a non-text part (images) — such results are left alone.
pub fn message_text(content: &Content) -> Option<String> {
    match content {
        Content::Text(s) => Some(s.clone()),
        Content::Blocks(blocks) => {
            let mut parts: Vec<&str> = Vec::with_capacity(blocks.len());
            for b in blocks {
                match b {
                    Value::String(s) => parts.push(s),
                    Value::Object(o) => match o.get("text") {
                        Some(Value::String(s)) => parts.push(s),
                        _ => return None,
                    },
                    _ => return None,
                }
            }
            (!parts.is_empty()).then(|| parts.join("\n"))
        }
    }
}

/// Char length without counting when the byte length already decides `<= limit`.
fn longer_than(content: &Content, limit: usize) -> bool {
    match content {
        Content::Text(s) => s.len() > limit && s.chars().count() > limit,
        Content::Blocks(_) => {
            content.approx_len() > limit
                && message_text(content).is_some_and(|t| t.chars().count() > limit)
        }
    }
}

pub(crate) fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// Byte offset of char `c` (`s.len()` past the end).
pub(crate) fn byte_of(s: &str, c: usize) -> usize {
    s.char_indices().nth(c).map(|(b, _)| b).unwrap_or(s.len())
}

/// The first `n` chars.
pub(crate) fn head_chars(s: &str, n: usize) -> &str {
    &s[..byte_of(s, n)]
}

/// The last `n` chars.
pub(crate) fn tail_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((b, _)) => &s[b..],
        None => s,
    }
}

/// Snap an *end* position (chars) back to just after a newline in the second half of
/// `text[..pos]`, so a head ends on a whole line; unchanged when there is none.
pub fn snap_end(text: &str, pos: usize) -> usize {
    let len = char_len(text);
    if pos == 0 || pos >= len {
        return pos;
    }
    let (bh, bp) = (byte_of(text, pos / 2), byte_of(text, pos));
    match text[bh..bp].rfind('\n') {
        Some(i) => char_len(&text[..bh + i]) + 1,
        None => pos,
    }
}

/// Snap a *start* position (chars) forward to just after a newline in the first half of
/// `text[pos..]`, so a tail starts on a whole line; unchanged when there is none.
pub fn snap_start(text: &str, pos: usize) -> usize {
    let len = char_len(text);
    if pos == 0 || pos >= len {
        return pos;
    }
    let half = pos + (len - pos) / 2;
    let (bp, bh) = (byte_of(text, pos), byte_of(text, half));
    match text[bp..bh].find('\n') {
        Some(i) => char_len(&text[..bp + i]) + 1,
        None => pos,
    }
}

fn fallback_marker(omitted: usize, tool: &str) -> String {
    format!(
        "\n\n[... {omitted} chars omitted from {tool} output. Persistent storage unavailable. Narrow the query or use more specific parameters to see the rest.]\n\n"
    )
}

/// Head + marker + tail, both cut on line boundaries; never longer than `max_chars` chars.
pub fn fallback_truncate(
    content: &str,
    tool: &str,
    max_chars: usize,
    head: usize,
    tail: usize,
) -> String {
    let total = char_len(content);
    if max_chars == 0 || total <= max_chars {
        return content.to_owned();
    }
    let overhead = char_len(&fallback_marker(total, tool));
    if overhead >= max_chars {
        return head_chars(content, max_chars).to_owned();
    }
    let budget = max_chars - overhead;
    let eh = head.min(budget);
    let et = tail.min(budget - eh);
    let head_end = snap_end(content, eh.min(total));
    let tail_start = snap_start(content, head_end.max(total - et));
    let h = &content[..byte_of(content, head_end)];
    let t = if tail_start < total {
        &content[byte_of(content, tail_start)..]
    } else {
        ""
    };
    let omitted = tail_start.min(total) - head_end;
    let mut out = String::with_capacity(h.len() + t.len() + overhead);
    out.push_str(h);
    out.push_str(&fallback_marker(omitted, tool));
    out.push_str(t);
    out
}

/// A tool name safe to use in a file name (empty ⇒ `unknown`).
pub fn sanitize_tool_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let safe = base.replace("..", "").replace(['/', '\\'], "_");
    if safe.is_empty() {
        "unknown".to_owned()
    } else {
        safe
    }
}

fn extension(tool: &str) -> &'static str {
    match tool {
        "bash" | "bash_tool" | "web_fetch" => "log",
        _ => "txt",
    }
}

/// Save `content` under `{outputs}/{subdir}/`; the virtual path on success.
pub fn externalize(
    content: &str,
    tool: &str,
    outputs: &Path,
    subdir: &str,
) -> Result<String, String> {
    validate_storage_subdir(subdir)?;
    // Written through the outputs folder's handle (held under the user-data handle): a folder
    // replaced by a symlink is refused, never written through.
    let root = match (outputs.parent(), outputs.file_name()) {
        (Some(ud), Some(name)) => RootDir::child(
            &RootDir::no_follow(ud, VIRTUAL_USER_DATA),
            name,
            VIRTUAL_OUTPUTS,
        ),
        _ => RootDir::no_follow(outputs, VIRTUAL_OUTPUTS),
    };
    let b = root.open_or_create().map_err(|e| e.to_string())?;
    b.create_dir_all(Path::new(subdir))
        .map_err(|e| format!("create {VIRTUAL_OUTPUTS}/{subdir}: {e}"))?;
    let hex = uuid::Uuid::new_v4().simple().to_string();
    let file = format!(
        "{}-{}.{}",
        sanitize_tool_name(tool),
        &hex[..12],
        extension(tool)
    );
    let mut o = cap_std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    b.open_with(&Path::new(subdir).join(&file), &o)
        .and_then(|f| {
            use std::io::Write;
            f.into_std().write_all(content.as_bytes())
        })
        .map_err(|e| format!("write {VIRTUAL_OUTPUTS}/{subdir}/{file}: {e}"))?;
    Ok(format!("{VIRTUAL_OUTPUTS}/{subdir}/{file}"))
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What budgeting did to one result.
#[derive(Clone, Debug, PartialEq)]
pub struct Budgeted {
    /// The text the model sees instead.
    pub text: String,
    /// The receipt stored in `additional_kwargs.tool_output_budget`.
    pub receipt: Value,
}

/// Apply the budget to one result's text. `None` when it fits. `outputs` is the thread's host
/// outputs folder (no folder ⇒ inline truncation only).
pub fn budget_text(
    text: &str,
    tool: &str,
    outputs: Option<&Path>,
    s: &ToolOutputConfig,
) -> Option<Budgeted> {
    let threshold = threshold(s, tool);
    let fallback = s.fallback_max_chars;
    if threshold == 0 && fallback == 0 {
        return None;
    }
    let total = char_len(text);
    if total <= threshold && total <= fallback {
        return None;
    }
    if threshold > 0 && total > threshold {
        let saved = match outputs {
            Some(dir) => externalize(text, tool, dir, &s.storage_subdir),
            None => Err("the thread has no outputs folder".to_owned()),
        };
        match saved {
            Ok(path) => {
                tracing::info!(tool, chars = total, path = %path, "tool output saved to a file");
                let text_out = render_preview(
                    text,
                    tool,
                    &path,
                    s.preview_head_chars,
                    s.preview_tail_chars,
                );
                return Some(Budgeted {
                    receipt: json!({
                        "mode": "externalized",
                        "path": path,
                        "original_chars": total,
                        "original_sha256": sha256_hex(text),
                    }),
                    text: text_out,
                });
            }
            Err(e) => {
                tracing::warn!(tool, error = %e, "could not save tool output; truncating inline")
            }
        }
    }
    if fallback > 0 && total > fallback {
        let out = fallback_truncate(
            text,
            tool,
            fallback,
            s.fallback_head_chars,
            s.fallback_tail_chars,
        );
        let kept = char_len(&out);
        return Some(Budgeted {
            receipt: json!({
                "mode": "truncated",
                "path": Value::Null,
                "original_chars": total,
                "original_sha256": sha256_hex(text),
                "kept_chars": kept,
            }),
            text: out,
        });
    }
    None
}

fn over_budget(m: &ToolMessage, s: &ToolOutputConfig) -> bool {
    let name = m.name.as_deref().unwrap_or("");
    if s.exempt_tools.iter().any(|e| e == name) {
        return false;
    }
    match trigger(s, name) {
        Some(t) => longer_than(&m.content, t),
        None => false,
    }
}

/// The budgeted copy of `m` (same id and metadata), or `None` when it is left alone.
fn patch(
    m: &ToolMessage,
    fallback_name: &str,
    outputs: Option<&Path>,
    s: &ToolOutputConfig,
    receipt: bool,
) -> Option<ToolMessage> {
    let tool = m
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(fallback_name);
    let tool = if tool.is_empty() { "unknown" } else { tool };
    if s.exempt_tools.iter().any(|e| e == tool) {
        return None;
    }
    let text = message_text(&m.content)?;
    let b = budget_text(&text, tool, outputs, s)?;
    let mut out = m.clone();
    out.content = Content::Text(b.text);
    if receipt {
        out.additional_kwargs.insert(RECEIPT_KEY.into(), b.receipt);
    }
    Some(out)
}

fn report(run: &RunContext, m: &ToolMessage) {
    if run.observed() {
        if let Some(r) = m.additional_kwargs.get(RECEIPT_KEY) {
            let payload = json!({"tool_call_id": m.tool_call_id, "tool": m.name, "receipt": r});
            run.observe(&RunEvent::Middleware {
                name: NAME,
                action: "tool_output_budget",
                payload: &payload,
            });
        }
    }
}

#[async_trait]
impl Middleware for ToolOutputBudgetMiddleware {
    middleware_identity!(NAME, HookSet::WRAP_MODEL | HookSet::WRAP_TOOL);

    async fn wrap_tool_call(&self, req: ToolCallRequest, next: ToolNext<'_>) -> ToolResult {
        let s = self.settings.clone();
        let call_name = req.call.name.clone();
        let run = req.run.clone();
        let outcome = next.run(req).await?;
        if !s.enabled {
            return Ok(outcome);
        }
        let needs = match &outcome {
            ToolOutcome::Message(m) => over_budget(m, &s),
            ToolOutcome::Command(c) => c
                .update
                .messages
                .iter()
                .flatten()
                .any(|m| matches!(m, Message::Tool(t) if over_budget(t, &s))),
        };
        if !needs {
            return Ok(outcome);
        }
        // Resolved only for a result over budget (most are not: a step need not build paths).
        let outputs = self.outputs_of(&run);
        // Saving and summarising a large output is blocking work: keep it off the async threads.
        let patched = tokio::task::spawn_blocking(move || {
            let outputs = outputs.as_deref();
            match outcome {
                ToolOutcome::Message(m) => {
                    let p = patch(&m, &call_name, outputs, &s, true);
                    ToolOutcome::Message(p.unwrap_or(m))
                }
                ToolOutcome::Command(mut c) => {
                    for msg in c.update.messages.iter_mut().flatten() {
                        if let Message::Tool(t) = msg {
                            if let Some(p) = patch(t, &call_name, outputs, &s, true) {
                                *t = p;
                            }
                        }
                    }
                    ToolOutcome::Command(c)
                }
            }
        })
        .await
        .map_err(|e| ToolError::Failed(format!("tool output budget task failed: {e}")))?;
        match &patched {
            ToolOutcome::Message(m) => report(&run, m),
            ToolOutcome::Command(c) => {
                for m in c.update.messages.iter().flatten() {
                    if let Message::Tool(t) = m {
                        report(&run, t);
                    }
                }
            }
        }
        Ok(patched)
    }

    async fn wrap_model_call(&self, mut req: ModelRequest, next: ModelNext<'_>) -> ModelResult {
        let s = &self.settings;
        if !s.enabled {
            return next.run(req).await;
        }
        // Resume from where the last request of this run stopped checking, if the list still
        // holds the same message there; otherwise check everything once.
        let msgs = req.messages.clone();
        let (mut start, mut over) = (0usize, Vec::<usize>::new());
        if let Some(prev) = req.run.get(&CHECKED_KEY) {
            let Checked {
                n,
                id,
                over: prev_over,
            } = prev;
            let same = n <= msgs.len() && (n == 0 || msgs[n - 1].id() == id.as_deref());
            if same {
                start = n;
                over = prev_over
                    .into_iter()
                    .filter(|&i| matches!(msgs.get(i).map(|m| &**m), Some(Message::Tool(t)) if over_budget(t, s)))
                    .collect();
            }
        }
        for (i, m) in msgs.iter().enumerate().skip(start) {
            if let Message::Tool(t) = &**m {
                if over_budget(t, s) {
                    over.push(i);
                }
            }
        }
        req.run.set(
            &CHECKED_KEY,
            Checked {
                n: msgs.len(),
                id: msgs.last().and_then(|m| m.id()).map(str::to_owned),
                over: over.clone(),
            },
        );
        if !over.is_empty() {
            let list = req.messages_mut();
            for i in over {
                if let Some(Message::Tool(t)) = list.get(i).map(|m| &**m) {
                    if let Some(p) = patch(t, "", None, s, false) {
                        list[i] = Arc::new(Message::Tool(p));
                    }
                }
            }
        }
        next.run(req).await
    }
}

mod synopsis;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn externalizing_never_writes_through_a_swapped_outputs_folder() {
        let t = tempfile::tempdir().unwrap();
        let canary = tempfile::tempdir().unwrap();
        let ud = t.path().join("threads/t1/user-data");
        std::fs::create_dir_all(&ud).unwrap();
        let outputs = ud.join("outputs");
        assert!(externalize("x", "bash", &outputs, ".tool-results")
            .unwrap()
            .starts_with("/mnt/user-data/outputs/.tool-results/bash-"));
        std::fs::remove_dir_all(&outputs).unwrap();
        std::os::unix::fs::symlink(canary.path(), &outputs).unwrap();
        let e = externalize("x", "bash", &outputs, ".tool-results").unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
        assert_eq!(std::fs::read_dir(canary.path()).unwrap().count(), 0);
    }

    #[test]
    fn text_extraction_rules() {
        assert_eq!(
            message_text(&Content::Text("a".into())).as_deref(),
            Some("a")
        );
        let blocks = Content::Blocks(vec![json!("a"), json!({"type": "text", "text": "b"})]);
        assert_eq!(message_text(&blocks).as_deref(), Some("a\nb"));
        let image = Content::Blocks(vec![
            json!({"type": "text", "text": "b"}),
            json!({"type": "image_url", "image_url": {"url": "data:"}}),
        ]);
        assert_eq!(message_text(&image), None);
        assert_eq!(message_text(&Content::Blocks(vec![])), None);
    }

    #[test]
    fn line_snapping_moves_ends_back_and_starts_forward() {
        let text = "aaaa\nbbbb\ncccc\ndddd\n";
        // End at 12 (inside "cccc"): snaps back to just after "bbbb\n" (10).
        assert_eq!(snap_end(text, 12), 10);
        // Start at 7 (inside "bbbb"): snaps forward to just after it (10).
        assert_eq!(snap_start(text, 7), 10);
        // Out-of-range positions are returned as is.
        assert_eq!(snap_end(text, 0), 0);
        assert_eq!(snap_start(text, 100), 100);
        // No newline in the searched half: unchanged.
        assert_eq!(snap_end("abcdefgh", 6), 6);
    }

    #[test]
    fn fallback_never_exceeds_the_cap_and_keeps_head_and_tail() {
        let content: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        for cap in [1, 10, 50, 200, 1000, 5000, 30_000] {
            let out = fallback_truncate(&content, "bash", cap, 800, 300);
            assert!(char_len(&out) <= cap, "cap {cap}: {}", char_len(&out));
        }
        let out = fallback_truncate(&content, "bash", 2000, 800, 300);
        assert!(out.starts_with("line 0\n"));
        assert!(out.ends_with("line 4999\n"));
        assert!(out.contains("chars omitted from bash output. Persistent storage unavailable."));
        // 0 disables; short content is untouched.
        assert_eq!(fallback_truncate(&content, "bash", 0, 1, 1), content);
        assert_eq!(fallback_truncate("short", "bash", 100, 1, 1), "short");
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let content = "数据".repeat(10_000);
        let out = fallback_truncate(&content, "t", 1000, 400, 200);
        assert!(char_len(&out) <= 1000);
        assert!(out.starts_with("数据"));
    }

    #[test]
    fn storage_subdir_must_be_one_name() {
        for bad in ["", ".", "..", "a/b", "a\\b", "/abs"] {
            assert!(validate_storage_subdir(bad).is_err(), "{bad}");
        }
        assert!(validate_storage_subdir(".tool-results").is_ok());
    }

    #[test]
    fn tool_names_are_sanitized() {
        assert_eq!(sanitize_tool_name("bash"), "bash");
        assert_eq!(sanitize_tool_name("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_tool_name("a..b"), "ab");
        assert_eq!(sanitize_tool_name(""), "unknown");
        assert_eq!(sanitize_tool_name(".."), "unknown");
    }

    #[test]
    fn thresholds_are_strict_and_overridable() {
        let dir = tempfile::tempdir().unwrap();
        let s = ToolOutputConfig {
            externalize_min_chars: 100,
            ..Default::default()
        };
        let at = "x".repeat(100);
        assert!(budget_text(&at, "bash", Some(dir.path()), &s).is_none());
        let over = "x".repeat(101);
        let b = budget_text(&over, "bash", Some(dir.path()), &s).unwrap();
        assert_eq!(b.receipt["mode"], "externalized");

        let mut s0 = s.clone();
        s0.tool_overrides.insert("bash".into(), 0);
        // Never saved; below the fallback cap it stays as is.
        assert!(budget_text(&over, "bash", Some(dir.path()), &s0).is_none());
        s0.tool_overrides.insert("bash".into(), 500);
        assert!(budget_text(&over, "bash", Some(dir.path()), &s0).is_none());
    }
}
