//! Deterministic, model-free synopses of oversized tool output: the preview that replaces a
//! result [`super`] externalizes. A content sniffer picks the kind (JSON, table, log, code,
//! YAML, text) and summarizes its shape without parsing anything past a size bound.

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
pub fn render_preview(content: &str, tool: &str, path: &str, head: usize, tail: usize) -> String {
    let total = char_len(content);
    let mut syn = build_synopsis(content, tool);
    if syn.kind == "text" && head + tail > 0 && total > head + tail {
        // The raw sample below already shows the opening and closing text.
        syn = summarize_text(content, tool, false);
    }
    let mut lines = vec![
        format!(
            "[Full {tool} output saved to {path} ({total} chars, ~{} tokens).]",
            total / 4
        ),
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

/// The first [`KEY_LIMIT`] keys of an object.
fn first_keys(o: &serde_json::Map<String, Value>) -> Vec<&str> {
    o.keys().take(KEY_LIMIT).map(String::as_str).collect()
}

/// `items` joined by `, ` between `before` and `after`; nothing when there are no items.
fn listed<S: AsRef<str>>(before: &str, items: &[S], after: &str) -> String {
    if items.is_empty() {
        return String::new();
    }
    let joined: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("{before}{}{after}", joined.join(", "))
}

fn json_shape(v: &Value, depth: usize) -> String {
    if depth >= JSON_SHAPE_MAX_DEPTH {
        return "...".to_owned();
    }
    match v {
        Value::Object(o) => {
            let suffix = listed(": ", &first_keys(o), "");
            format!("object(keys={}{suffix})", o.len())
        }
        Value::Array(a) => {
            let samples: Vec<String> = a.iter().take(3).map(|i| json_shape(i, depth + 1)).collect();
            let suffix = listed(", first=[", &samples, "]");
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
            let suffix = listed("; keys ", &first_keys(o), "");
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
        !matches(&HEADER, r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$", c.trim()) || c.starts_with([' ', '\t'])
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
        if let Some(item) = line
            .strip_prefix("- ")
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
                Some(n) if n.starts_with([' ', '\t']) && n.trim_start().starts_with('-') => "array",
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
