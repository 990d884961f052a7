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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_protocol::{Content, Message, ToolMessage};
use antler_runtime::{
    HookSet, Middleware, ModelCallError, ModelNext, ModelRequest, ModelResponse, RunContext,
    RunEvent, ToolCallRequest, ToolError, ToolNext, ToolOutcome,
};
use antler_sandbox::paths::VIRTUAL_USER_DATA;
use antler_sandbox::RootDir;
use async_trait::async_trait;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub use synopsis::{build_synopsis, render_preview, Synopsis};

const NAME: &str = "ToolOutputBudgetMiddleware";
/// Where `/mnt/user-data/outputs` points for the model.
const VIRTUAL_OUTPUTS: &str = "/mnt/user-data/outputs";
/// `additional_kwargs` key of the receipt on a budgeted tool message.
pub const RECEIPT_KEY: &str = "tool_output_budget";
/// Run-context key: how far the history has been checked (see `wrap_model_call`).
const CHECKED_KEY: &str = "ToolOutputBudgetMiddleware.checked";

/// `tool_output:` (spec 60 §9).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutputBudgetSettings {
    pub enabled: bool,
    /// Results longer than this (chars) are saved to a file; 0 disables saving.
    pub externalize_min_chars: usize,
    pub preview_head_chars: usize,
    pub preview_tail_chars: usize,
    /// Inline head+tail cap when nothing could be saved; 0 disables.
    pub fallback_max_chars: usize,
    pub fallback_head_chars: usize,
    pub fallback_tail_chars: usize,
    /// One directory name under the thread's outputs folder.
    pub storage_subdir: String,
    /// Never budgeted (reading a saved result back must not be saved again).
    pub exempt_tools: Vec<String>,
    /// Per-tool save threshold; 0 = never save that tool's output.
    pub tool_overrides: BTreeMap<String, usize>,
}

impl Default for ToolOutputBudgetSettings {
    fn default() -> Self {
        ToolOutputBudgetSettings {
            enabled: true,
            externalize_min_chars: 12_000,
            preview_head_chars: 2_000,
            preview_tail_chars: 1_000,
            fallback_max_chars: 30_000,
            fallback_head_chars: 8_000,
            fallback_tail_chars: 3_000,
            storage_subdir: ".tool-results".to_owned(),
            exempt_tools: vec!["read_file".to_owned(), "read_file_tool".to_owned()],
            tool_overrides: BTreeMap::new(),
        }
    }
}

impl ToolOutputBudgetSettings {
    fn threshold(&self, tool: &str) -> usize {
        self.tool_overrides
            .get(tool)
            .copied()
            .unwrap_or(self.externalize_min_chars)
    }

    /// Smallest length that could trigger budgeting for `tool` (`None`: nothing ever does).
    fn trigger(&self, tool: &str) -> Option<usize> {
        [self.threshold(tool), self.fallback_max_chars]
            .into_iter()
            .filter(|n| *n > 0)
            .min()
    }
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
    settings: Arc<ToolOutputBudgetSettings>,
    home: Option<PathBuf>,
}

impl ToolOutputBudgetMiddleware {
    /// Without a data home (see [`Self::with_home`]) large results are cut inline only.
    pub fn new(settings: ToolOutputBudgetSettings) -> Self {
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
    s: &ToolOutputBudgetSettings,
) -> Option<Budgeted> {
    let threshold = s.threshold(tool);
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

fn over_budget(m: &ToolMessage, s: &ToolOutputBudgetSettings) -> bool {
    let name = m.name.as_deref().unwrap_or("");
    if s.exempt_tools.iter().any(|e| e == name) {
        return false;
    }
    match s.trigger(name) {
        Some(t) => longer_than(&m.content, t),
        None => false,
    }
}

/// The budgeted copy of `m` (same id and metadata), or `None` when it is left alone.
fn patch(
    m: &ToolMessage,
    fallback_name: &str,
    outputs: Option<&Path>,
    s: &ToolOutputBudgetSettings,
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
    fn name(&self) -> &str {
        NAME
    }

    fn hooks(&self) -> HookSet {
        HookSet::WRAP_MODEL | HookSet::WRAP_TOOL
    }

    async fn wrap_tool_call(
        &self,
        req: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<ToolOutcome, ToolError> {
        let s = self.settings.clone();
        let call_name = req.call.name.clone();
        let outputs = self.outputs_of(&req.run);
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

    async fn wrap_model_call(
        &self,
        mut req: ModelRequest,
        next: ModelNext<'_>,
    ) -> Result<ModelResponse, ModelCallError> {
        let s = &self.settings;
        if !s.enabled {
            return next.run(req).await;
        }
        // Resume from where the last request of this run stopped checking, if the list still
        // holds the same message there; otherwise check everything once.
        let msgs = req.messages.clone();
        let (mut start, mut over) = (0usize, Vec::<usize>::new());
        if let Some(prev) = req.run.get(CHECKED_KEY) {
            let n = prev.get("n").and_then(Value::as_u64).unwrap_or(0) as usize;
            let id = prev.get("id").and_then(Value::as_str);
            let same = n <= msgs.len() && (n == 0 || msgs[n - 1].id() == id);
            if same {
                let prev_over: Vec<usize> = prev
                    .get("over")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_u64().map(|x| x as usize))
                            .collect()
                    })
                    .unwrap_or_default();
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
            CHECKED_KEY,
            json!({"n": msgs.len(), "id": msgs.last().and_then(|m| m.id()), "over": over}),
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

/// Deterministic, model-free synopses of oversized tool output (the preview that replaces it).
mod synopsis {
    use std::sync::OnceLock;

    use regex::Regex;
    use serde_json::Value;

    use super::{char_len, head_chars, tail_chars};

    const KEY_LIMIT: usize = 12;
    const SCALAR_LIMIT: usize = 6;
    const TABLE_SAMPLE_ROWS: usize = 50;
    const TABLE_COLUMN_LIMIT: usize = 18;
    const TABLE_MIN_DATA_ROWS: usize = 5;
    const TEXT_HEADER_LIMIT: usize = 16;
    const TEXT_EXCERPT_CHARS: usize = 420;
    const CODE_IMPORT_LIMIT: usize = 12;
    const CODE_SYMBOL_LIMIT: usize = 24;
    const JSON_SHAPE_MAX_DEPTH: usize = 2;
    const JSON_STRUCTURE_LIMIT: usize = 24;
    const JSON_STRUCTURE_DEPTH: usize = 4;
    /// Above this many bytes nothing is parsed (bounds CPU and memory on huge dumps).
    const MAX_SYNOPSIS_INPUT_BYTES: usize = 5_000_000;
    /// Above this many chars YAML-looking text is not analysed.
    const YAML_MAX_CHARS: usize = 500_000;

    /// A structured preview of one output.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Synopsis {
        /// `json`, `csv`, `tsv`, `yaml`, `xml`, `code`, `text` or `unknown`.
        pub kind: &'static str,
        pub title: String,
        pub summary: Vec<String>,
        pub structure: Vec<String>,
        pub notable: Vec<String>,
        /// A raw sample chosen by the synopsis itself (binary-like and oversized output).
        pub sample: String,
    }

    impl Synopsis {
        fn new(kind: &'static str, title: &str, summary: Vec<String>) -> Self {
            Synopsis {
                kind,
                title: title.to_owned(),
                summary,
                structure: Vec::new(),
                notable: Vec::new(),
                sample: String::new(),
            }
        }
    }

    /// A compiled constant pattern (`None` only if the pattern were invalid; unit-tested).
    fn re(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
        cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
    }

    fn matches(cell: &'static OnceLock<Option<Regex>>, pattern: &str, text: &str) -> bool {
        re(cell, pattern).is_some_and(|r| r.is_match(text))
    }

    fn clip(value: &str, limit: usize) -> String {
        if limit == 0 {
            return String::new();
        }
        if char_len(value) <= limit {
            return value.to_owned();
        }
        format!("{}...", head_chars(value, limit.saturating_sub(3)))
    }

    fn one_line(value: &str, limit: usize) -> String {
        clip(
            &value.split_whitespace().collect::<Vec<_>>().join(" "),
            limit,
        )
    }

    fn head_tail_sample(content: &str, limit: usize) -> String {
        if limit == 0 {
            return String::new();
        }
        if char_len(content) <= limit {
            return content.to_owned();
        }
        let half = (limit / 2).max(1);
        format!(
            "{}\n...\n{}",
            head_chars(content, half),
            tail_chars(content, half)
        )
    }

    fn looks_binary(content: &str) -> bool {
        if content.contains('\0') {
            return true;
        }
        let sample = head_chars(content, 1000);
        let n = char_len(sample).max(1);
        let controls = sample
            .chars()
            .filter(|c| (*c as u32) < 32 && !matches!(c, '\n' | '\r' | '\t'))
            .count();
        controls as f64 / n as f64 > 0.05
    }

    /// Build the synopsis of `content` (no model involved).
    pub fn build_synopsis(content: &str, tool: &str) -> Synopsis {
        if content.is_empty() {
            return Synopsis::new(
                "unknown",
                "Empty output",
                vec!["The tool returned an empty string.".to_owned()],
            );
        }
        let total = char_len(content);
        if content.len() > MAX_SYNOPSIS_INPUT_BYTES {
            let mut s = Synopsis::new(
                "unknown",
                "Oversized output",
                vec![format!(
                    "The output has {total} characters ({:.1} MB); it was too large to analyse, so only a raw sample follows.",
                    content.len() as f64 / 1024.0 / 1024.0
                )],
            );
            s.sample = head_tail_sample(content, TEXT_EXCERPT_CHARS * 2);
            return s;
        }
        if looks_binary(content) {
            let mut s = Synopsis::new(
                "unknown",
                "Binary-like output",
                vec![format!(
                    "The output has {total} characters and contains control bytes, so it is probably not text."
                )],
            );
            s.sample = head_tail_sample(content, TEXT_EXCERPT_CHARS * 2);
            return s;
        }
        let stripped = content.trim();
        if let Some(s) = try_json(stripped) {
            return s;
        }
        if let Some(s) = try_xml(stripped) {
            return s;
        }
        if content.contains('\t') {
            if let Some(s) = try_table(content, '\t', "tsv") {
                return s;
            }
        }
        if content.contains(',') {
            if let Some(s) = try_table(content, ',', "csv") {
                return s;
            }
        }
        if let Some(s) = try_yaml(content) {
            return s;
        }
        if looks_code(content) {
            return summarize_code(content);
        }
        summarize_text(content, tool, true)
    }

    /// The text that replaces a saved output: the receipt header, the synopsis, a raw head/tail
    /// sample and how to read the rest.
    pub fn render_preview(
        content: &str,
        tool: &str,
        path: &str,
        head: usize,
        tail: usize,
    ) -> String {
        let total = char_len(content);
        let mut syn = build_synopsis(content, tool);
        if syn.kind == "text" && head + tail > 0 && total > head + tail {
            // The raw sample below already shows the opening and closing text.
            syn = summarize_text(content, tool, false);
        }
        let mut lines = vec![
            format!("[Full {tool} output saved to {path} ({total} chars, ~{} tokens).]", total / 4),
            format!(
                "[Preview kind: {}. This is a structured synopsis, not a raw head/tail truncation.]",
                syn.kind
            ),
            String::new(),
            format!("{}:", syn.title),
        ];
        lines.extend(syn.summary.iter().map(|s| format!("- {s}")));
        if !syn.structure.is_empty() {
            lines.push(String::new());
            lines.push("Structure:".to_owned());
            lines.extend(syn.structure.iter().map(|s| format!("- {s}")));
        }
        if !syn.notable.is_empty() {
            lines.push(String::new());
            lines.push("Notable items:".to_owned());
            lines.extend(syn.notable.iter().map(|s| format!("- {s}")));
        }
        let sample = raw_sample(content, head, tail, &syn.sample);
        if !sample.is_empty() {
            lines.push(String::new());
            lines.push("Raw sample (start and end of the output):".to_owned());
            lines.push(sample);
        }
        lines.push(String::new());
        lines.push("Access:".to_owned());
        lines.push(format!(
            "- Use read_file on {path} with start_line and end_line to read any part of the full output."
        ));
        lines.join("\n")
    }

    fn raw_sample(content: &str, head: usize, tail: usize, existing: &str) -> String {
        if !existing.is_empty() {
            return existing.to_owned();
        }
        if head == 0 && tail == 0 {
            return String::new();
        }
        let total = char_len(content);
        if total <= head + tail {
            return content.to_owned();
        }
        let mut parts: Vec<&str> = Vec::new();
        if head > 0 {
            let mut h = head_chars(content, head);
            if let Some(i) = h.rfind('\n').filter(|i| *i > 0) {
                h = &h[..i];
            }
            parts.push(h);
        }
        if tail > 0 {
            let mut t = tail_chars(content, tail);
            if let Some(i) = t.find('\n').filter(|i| *i + 1 < t.len()) {
                t = &t[i + 1..];
            }
            parts.push(t);
        }
        parts.join("\n...\n")
    }

    // -- JSON ---------------------------------------------------------------------------------

    fn type_name(v: &Value) -> &'static str {
        match v {
            Value::Object(_) => "object",
            Value::Array(_) => "array",
            Value::Bool(_) => "boolean",
            Value::Null => "null",
            Value::Number(_) => "number",
            Value::String(_) => "string",
        }
    }

    fn short_value(v: &Value) -> String {
        match v {
            Value::String(s) => Value::String(clip(s, 80)).to_string(),
            other => clip(&other.to_string(), 80),
        }
    }

    fn json_shape(v: &Value, depth: usize) -> String {
        if depth >= JSON_SHAPE_MAX_DEPTH {
            return "...".to_owned();
        }
        match v {
            Value::Object(o) => {
                let keys: Vec<&str> = o.keys().take(KEY_LIMIT).map(String::as_str).collect();
                let suffix = if keys.is_empty() {
                    String::new()
                } else {
                    format!(": {}", keys.join(", "))
                };
                format!("object(keys={}{suffix})", o.len())
            }
            Value::Array(a) => {
                let samples: Vec<String> =
                    a.iter().take(3).map(|i| json_shape(i, depth + 1)).collect();
                let suffix = if samples.is_empty() {
                    String::new()
                } else {
                    format!(", first=[{}]", samples.join(", "))
                };
                format!("array(len={}{suffix})", a.len())
            }
            other => type_name(other).to_owned(),
        }
    }

    fn json_path(parent: &str, key: &str) -> String {
        static IDENT: OnceLock<Option<Regex>> = OnceLock::new();
        if matches(&IDENT, r"^[A-Za-z_][A-Za-z0-9_]*$", key) {
            format!("{parent}.{key}")
        } else {
            format!("{parent}[{}]", Value::String(key.to_owned()))
        }
    }

    fn container_description(v: &Value) -> String {
        match v {
            Value::Object(o) => {
                let keys: Vec<&str> = o.keys().take(KEY_LIMIT).map(String::as_str).collect();
                let suffix = if keys.is_empty() {
                    String::new()
                } else {
                    format!("; keys {}", keys.join(", "))
                };
                format!("object keys {}{suffix}", o.len())
            }
            Value::Array(a) => match a.first() {
                Some(f) => format!("array length {}; first item {}", a.len(), type_name(f)),
                None => format!("array length {}", a.len()),
            },
            other => type_name(other).to_owned(),
        }
    }

    /// Paths of nested containers (no byte offsets: a key string can also appear as a value,
    /// so any offset found by searching would be wrong).
    fn container_paths(v: &Value) -> Vec<String> {
        fn walk(node: &Value, path: &str, depth: usize, out: &mut Vec<String>) {
            if out.len() >= JSON_STRUCTURE_LIMIT || depth >= JSON_STRUCTURE_DEPTH {
                return;
            }
            match node {
                Value::Object(o) => {
                    for (k, child) in o.iter().take(KEY_LIMIT) {
                        if out.len() >= JSON_STRUCTURE_LIMIT {
                            break;
                        }
                        if child.is_object() || child.is_array() {
                            let p = json_path(path, k);
                            out.push(format!("{p}: {}", container_description(child)));
                            walk(child, &p, depth + 1, out);
                        }
                    }
                }
                Value::Array(a) => {
                    if let Some(first) = a.first().filter(|f| f.is_object() || f.is_array()) {
                        walk(first, &format!("{path}[]"), depth + 1, out);
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(v, "$", 0, &mut out);
        out
    }

    fn scalar_examples(v: &Value) -> Vec<String> {
        fn walk(node: &Value, path: &str, depth: usize, out: &mut Vec<String>) {
            if out.len() >= SCALAR_LIMIT || depth >= JSON_STRUCTURE_DEPTH {
                return;
            }
            match node {
                Value::Object(o) => {
                    for (k, child) in o.iter().take(KEY_LIMIT) {
                        walk(child, &format!("{path}.{k}"), depth + 1, out);
                        if out.len() >= SCALAR_LIMIT {
                            break;
                        }
                    }
                }
                Value::Array(a) => {
                    for (i, child) in a.iter().take(2).enumerate() {
                        walk(child, &format!("{path}[{i}]"), depth + 1, out);
                        if out.len() >= SCALAR_LIMIT {
                            break;
                        }
                    }
                }
                scalar => out.push(format!("{path}: {}", short_value(scalar))),
            }
        }
        let mut out = Vec::new();
        walk(v, "$", 0, &mut out);
        out
    }

    fn try_json(stripped: &str) -> Option<Synopsis> {
        if !(stripped.starts_with('{') || stripped.starts_with('[')) {
            return None;
        }
        let mut it = serde_json::Deserializer::from_str(stripped).into_iter::<Value>();
        let value = it.next()?.ok()?;
        let trailing = char_len(stripped[it.byte_offset()..].trim());
        let mut s = Synopsis::new("json", "JSON output", Vec::new());
        s.structure
            .push(format!("shape: {}", json_shape(&value, 0)));
        s.structure.extend(container_paths(&value));
        s.notable = scalar_examples(&value);
        match &value {
            Value::Object(o) => {
                let keys: Vec<&str> = o.keys().map(String::as_str).collect();
                s.summary
                    .push(format!("JSON object with {} top-level keys.", keys.len()));
                let shown = keys
                    .iter()
                    .take(KEY_LIMIT)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                s.summary.push(format!(
                    "Top-level keys: {}",
                    if shown.is_empty() {
                        "(none)"
                    } else {
                        shown.as_str()
                    }
                ));
            }
            Value::Array(a) => {
                s.summary
                    .push(format!("JSON array with {} items.", a.len()));
                if let Some(f) = a.first() {
                    s.structure
                        .push(format!("first item type: {}", type_name(f)));
                }
            }
            other => s.summary.push(format!("JSON {}.", type_name(other))),
        }
        if trailing > 0 {
            s.notable.push(format!(
                "Trailing non-JSON characters after the first value: {trailing}"
            ));
        }
        Some(s)
    }

    // -- XML (a small tag scanner: no entities are expanded, nothing is fetched) ---------------

    /// Index of the `>` closing the tag that starts at `s[0] == '<'`, outside quotes.
    fn tag_end(s: &str) -> Option<usize> {
        let mut quote: Option<char> = None;
        for (i, c) in s.char_indices().skip(1) {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '>') => return Some(i),
                (None, '<') => return None,
                _ => {}
            }
        }
        None
    }

    fn tag_name(inner: &str) -> Option<&str> {
        let name = inner
            .trim_end_matches('/')
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()?;
        let mut chars = name.chars();
        let first = chars.next()?;
        let ok = (first.is_alphabetic() || first == '_')
            && chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '-' | '.'));
        ok.then_some(name)
    }

    /// Skip a comment, CDATA, processing instruction or declaration at `s`; bytes consumed.
    fn skip_special(s: &str) -> Option<usize> {
        for (open, close) in [
            ("<!--", "-->"),
            ("<![CDATA[", "]]>"),
            ("<?", "?>"),
            ("<!", ">"),
        ] {
            if let Some(rest) = s.strip_prefix(open) {
                return rest.find(close).map(|i| open.len() + i + close.len());
            }
        }
        Some(0)
    }

    fn try_xml(stripped: &str) -> Option<Synopsis> {
        if !stripped.starts_with('<') {
            return None;
        }
        let mut rest = stripped;
        loop {
            rest = rest.trim_start();
            match skip_special(rest)? {
                0 => break,
                n => rest = &rest[n..],
            }
        }
        if !rest.starts_with('<') {
            return None;
        }
        let end = tag_end(rest)?;
        let inner = &rest[1..end];
        let root = tag_name(inner)?.to_owned();
        let attrs = inner.matches('=').count();
        let mut children: Vec<(String, usize)> = Vec::new();
        if !inner.ends_with('/') {
            let mut pos = end + 1;
            let mut depth = 1usize;
            loop {
                let next = rest[pos..].find('<')? + pos;
                let at = &rest[next..];
                let skip = skip_special(at)?;
                if skip > 0 {
                    pos = next + skip;
                    continue;
                }
                let close = tag_end(at)?;
                let tag = &at[1..close];
                pos = next + close + 1;
                if let Some(name) = tag.strip_prefix('/') {
                    depth -= 1;
                    if depth == 0 {
                        if name.trim() != root || !rest[pos..].trim().is_empty() {
                            return None;
                        }
                        break;
                    }
                } else {
                    let name = tag_name(tag)?;
                    if depth == 1 {
                        match children.iter_mut().find(|(n, _)| n == name) {
                            Some((_, c)) => *c += 1,
                            None => children.push((name.to_owned(), 1)),
                        }
                    }
                    if !tag.ends_with('/') {
                        depth += 1;
                    }
                }
            }
        } else if !rest[end + 1..].trim().is_empty() {
            return None;
        }
        // Most common first; ties keep document order.
        children.sort_by_key(|c| std::cmp::Reverse(c.1));
        let mut s = Synopsis::new(
            "xml",
            "XML output",
            vec![format!("XML document with root tag {root}.")],
        );
        s.structure = vec![
            format!("root tag: {root}"),
            format!("root attributes: {attrs}"),
        ];
        s.structure.extend(
            children
                .iter()
                .take(KEY_LIMIT)
                .map(|(n, c)| format!("{n}: {c}")),
        );
        Some(s)
    }

    // -- CSV / TSV ----------------------------------------------------------------------------

    fn split_row(line: &str, delim: char) -> Vec<String> {
        let mut cells = Vec::new();
        let mut cell = String::new();
        let mut quoted = false;
        let mut at_start = true;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if quoted {
                if c == '"' {
                    if chars.peek() == Some(&'"') {
                        cell.push('"');
                        chars.next();
                    } else {
                        quoted = false;
                    }
                } else {
                    cell.push(c);
                }
            } else if c == delim {
                cells.push(std::mem::take(&mut cell));
                at_start = true;
                continue;
            } else if c == '"' && at_start {
                quoted = true;
            } else {
                cell.push(c);
            }
            at_start = false;
        }
        cells.push(cell);
        cells
    }

    fn try_table(content: &str, delim: char, kind: &'static str) -> Option<Synopsis> {
        static HEADER: OnceLock<Option<Regex>> = OnceLock::new();
        let rows: Vec<Vec<String>> = content
            .lines()
            .take(TABLE_SAMPLE_ROWS)
            .map(|l| split_row(l, delim))
            .filter(|r| r.iter().any(|c| !c.trim().is_empty()))
            .collect();
        if rows.len() < 2 || rows[0].len() < 2 {
            return None;
        }
        let width = rows[0].len();
        let consistent = rows
            .iter()
            .skip(1)
            .take(10)
            .filter(|r| r.len() == width)
            .count();
        if consistent < TABLE_MIN_DATA_ROWS {
            return None;
        }
        let header = &rows[0];
        if header.iter().any(|c| {
            !matches(&HEADER, r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$", c.trim())
                || c.starts_with([' ', '\t'])
        }) {
            return None;
        }
        let columns: Vec<String> = header
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let c = c.trim();
                if c.is_empty() {
                    format!("column_{}", i + 1)
                } else {
                    c.to_owned()
                }
            })
            .collect();
        let data_rows = content
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
            .saturating_sub(1);
        let first: Vec<String> = columns
            .iter()
            .zip(&rows[1])
            .take(TABLE_COLUMN_LIMIT)
            .map(|(c, v)| format!("{c}={}", clip(v, 80)))
            .collect();
        let label = kind.to_uppercase();
        let mut s = Synopsis::new(
            kind,
            &format!("{label} table output"),
            vec![format!(
                "{label} table with {data_rows} data rows and {width} columns."
            )],
        );
        s.structure = vec![
            format!(
                "columns: {}",
                columns
                    .iter()
                    .take(TABLE_COLUMN_LIMIT)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "first data row: {}",
                if first.is_empty() {
                    "(none)".to_owned()
                } else {
                    first.join(" | ")
                }
            ),
        ];
        Some(s)
    }

    // -- YAML (structure from indentation; no parser, so no alias bombs) ----------------------

    fn looks_yaml(content: &str) -> bool {
        static KEY_LINE: OnceLock<Option<Regex>> = OnceLock::new();
        if content.trim_start().starts_with("---") {
            return true;
        }
        if looks_code(content) {
            return false;
        }
        let mut keys = 0;
        for line in content.lines().take(80) {
            if !matches(&KEY_LINE, r"^\s*[A-Za-z_][A-Za-z0-9_.\-]*:\s*\S.*$", line) {
                continue;
            }
            // Log lines such as `INFO: starting` are not mappings.
            let key = line.split(':').next().unwrap_or("").trim();
            if key.chars().any(char::is_alphabetic)
                && key.chars().all(|c| !c.is_lowercase())
                && !key.contains('_')
            {
                continue;
            }
            keys += 1;
            if keys >= 3 {
                return true;
            }
        }
        false
    }

    fn scalar_type(v: &str) -> &'static str {
        let v = v.split(" #").next().unwrap_or(v).trim();
        match v {
            "" | "~" | "null" | "Null" | "NULL" => "null",
            "true" | "false" | "True" | "False" | "yes" | "no" => "boolean",
            _ if v.starts_with('[') => "array",
            _ if v.starts_with('{') => "object",
            _ if v.parse::<f64>().is_ok() => "number",
            _ => "string",
        }
    }

    fn try_yaml(content: &str) -> Option<Synopsis> {
        static TOP_KEY: OnceLock<Option<Regex>> = OnceLock::new();
        if !looks_yaml(content) || char_len(content) > YAML_MAX_CHARS {
            return None;
        }
        let top_key = re(
            &TOP_KEY,
            r#"^([A-Za-z_][\w.\-]*|"[^"]+"|'[^']+'):(?:\s+(.*))?$"#,
        )?;
        let lines: Vec<&str> = content
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .filter(|l| l.trim() != "---")
            .collect();
        let mut keys: Vec<(String, &'static str)> = Vec::new();
        let mut items = 0usize;
        let mut first_item: Option<&'static str> = None;
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with([' ', '\t']) {
                continue;
            }
            if let Some(item) =
                line.strip_prefix("- ")
                    .or(if *line == "-" { Some("") } else { None })
            {
                items += 1;
                if first_item.is_none() {
                    first_item = Some(if top_key.is_match(item) || item.contains(": ") {
                        "object"
                    } else {
                        scalar_type(item)
                    });
                }
                continue;
            }
            let caps = top_key.captures(line)?;
            let key = caps
                .get(1)
                .map(|m| m.as_str().trim_matches(['"', '\'']))
                .unwrap_or("");
            let value = caps.get(2).map(|m| m.as_str()).unwrap_or("");
            let kind = if value.trim().is_empty() || value.trim().starts_with('#') {
                match lines.get(i + 1) {
                    Some(n) if n.starts_with([' ', '\t']) && n.trim_start().starts_with('-') => {
                        "array"
                    }
                    Some(n) if n.starts_with([' ', '\t']) => "object",
                    // Block sequences may start at the key's own indentation.
                    Some(n) if n.starts_with("- ") => "array",
                    _ => "null",
                }
            } else {
                scalar_type(value)
            };
            keys.push((key.to_owned(), kind));
        }
        if !keys.is_empty() && items == 0 {
            // A flat mapping of strings is what log lines look like; not YAML worth describing.
            if keys.iter().all(|(_, k)| *k == "string") {
                return None;
            }
            let names: Vec<&str> = keys
                .iter()
                .take(KEY_LIMIT)
                .map(|(k, _)| k.as_str())
                .collect();
            let mut s = Synopsis::new(
                "yaml",
                "YAML output",
                vec![
                    format!("YAML object with {} top-level keys.", keys.len()),
                    format!("Top-level keys: {}", names.join(", ")),
                ],
            );
            s.structure = keys
                .iter()
                .take(KEY_LIMIT)
                .map(|(k, t)| format!("{k}: {t}"))
                .collect();
            return Some(s);
        }
        if keys.is_empty() && items > 0 {
            let mut s = Synopsis::new(
                "yaml",
                "YAML output",
                vec![format!("YAML array with {items} items.")],
            );
            if let Some(t) = first_item {
                s.structure.push(format!("first item type: {t}"));
            }
            return Some(s);
        }
        None
    }

    // -- code and text ------------------------------------------------------------------------

    fn looks_code(content: &str) -> bool {
        static A: OnceLock<Option<Regex>> = OnceLock::new();
        static B: OnceLock<Option<Regex>> = OnceLock::new();
        static C: OnceLock<Option<Regex>> = OnceLock::new();
        matches(&A, r"(?m)^\s*(?:from\s+\S+\s+import|import\s+\S+)", content)
            || matches(
                &B,
                r"(?m)^\s*(?:class|def|async\s+def|function|export\s+function)\s+[A-Za-z_]\w*",
                content,
            )
            || matches(
                &C,
                r"(?m)^\s*(?:package\s+[A-Za-z_][\w.]*|use\s+[A-Za-z_][\w:]*\s*;|pub\s+fn\s+[A-Za-z_]\w*\s*\(|fn\s+[A-Za-z_]\w*\s*\(|public\s+class\s+[A-Za-z_]\w*)",
                content,
            )
    }

    fn summarize_code(content: &str) -> Synopsis {
        static IMPORT: OnceLock<Option<Regex>> = OnceLock::new();
        static SYMBOL: OnceLock<Option<Regex>> = OnceLock::new();
        let import = re(&IMPORT, r"^(?:from\s+(\S+)\s+import|import\s+(\S+))");
        let symbol = re(
            &SYMBOL,
            r"^(class|def|async\s+def|function|export\s+function|pub\s+fn|fn)\s+([A-Za-z_]\w*)",
        );
        let mut imports = Vec::new();
        let mut symbols = Vec::new();
        let mut count = 0usize;
        for line in content.lines() {
            count += 1;
            let t = line.trim();
            if let Some(c) = import.and_then(|r| r.captures(t)) {
                let m = c
                    .get(1)
                    .or_else(|| c.get(2))
                    .map(|m| m.as_str())
                    .unwrap_or("");
                imports.push(one_line(m, 160));
                continue;
            }
            if let Some(c) = symbol.and_then(|r| r.captures(t)) {
                let kw = c.get(1).map(|m| m.as_str()).unwrap_or("");
                let name = c.get(2).map(|m| m.as_str()).unwrap_or("");
                symbols.push(one_line(&format!("{kw} {name}"), 180));
            }
        }
        let mut s = Synopsis::new(
            "code",
            "Code-like output",
            vec![format!("Code-like text with {count} lines.")],
        );
        s.structure.push(format!("line count: {count}"));
        if !imports.is_empty() {
            imports.truncate(CODE_IMPORT_LIMIT);
            s.structure.push(format!("imports: {}", imports.join(", ")));
        }
        symbols.truncate(CODE_SYMBOL_LIMIT);
        s.notable = symbols;
        s
    }

    fn summarize_text(content: &str, tool: &str, excerpts: bool) -> Synopsis {
        static MD: OnceLock<Option<Regex>> = OnceLock::new();
        static CAPS: OnceLock<Option<Regex>> = OnceLock::new();

        let mut headers: Vec<String> = Vec::new();
        let mut lines = 0usize;
        for line in content.lines() {
            lines += 1;
            let t = line.trim();
            if t.is_empty()
                || headers.len() >= TEXT_HEADER_LIMIT
                || !(matches(&MD, r"^#{1,6}\s+", t)
                    || matches(&CAPS, r"^[A-Z0-9][A-Z0-9\s:_-]{6,}$", t))
            {
                continue;
            }
            let h = one_line(t, 160);
            if !headers.contains(&h) {
                headers.push(h);
            }
        }
        let words = content.split_whitespace().count();
        let from = if tool.is_empty() {
            String::new()
        } else {
            format!(" from {tool}")
        };
        let total = char_len(content);
        let mut summary = vec![
            format!("Text output{from} with {total} characters, {words} words, and {lines} lines."),
            format!(
                "Detected section headers: {}.",
                if headers.is_empty() {
                    "none detected".to_owned()
                } else {
                    headers.join(" | ")
                }
            ),
        ];
        if excerpts {
            let opener = one_line(head_chars(content, TEXT_EXCERPT_CHARS), TEXT_EXCERPT_CHARS);
            summary.push(format!(
                "Opening excerpt: {}",
                if opener.is_empty() {
                    "(empty)"
                } else {
                    opener.as_str()
                }
            ));
            if total > TEXT_EXCERPT_CHARS {
                let n = (total - TEXT_EXCERPT_CHARS).min(TEXT_EXCERPT_CHARS);
                let closer = one_line(tail_chars(content, n), TEXT_EXCERPT_CHARS);
                if !closer.is_empty() {
                    summary.push(format!("Closing excerpt: {closer}"));
                }
            }
        }
        Synopsis::new("text", "Text output", summary)
    }
}

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
        let s = ToolOutputBudgetSettings {
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
