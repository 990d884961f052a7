//! Every block tag antler itself puts into a model's input must be in the neutralizer's list,
//! or untrusted text could forge it (DeerFlow's denylist policy). The code is scanned for closing
//! tag literals so a new block tag cannot be added without classifying it here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use antler_protocol::untrusted::BLOCKED_TAGS;

/// Tags that appear in the code but are not framework authority blocks of the agent's input:
/// children of `<available_skills>` and of `<slash_skill_activation>` (blocked as a whole),
/// prompts of the separate summary and
/// memory model calls, and HTML in examples.
const NOT_BLOCKS: &[&str] = &[
    "skill",
    "name",
    "description",
    "location",
    "user_request",
    "skill_content",
    "conversation",
    "current_memory",
    "stale_facts",
    "consolidation_candidates",
    "new_messages",
    "messages",
    "existing_summary",
    "b",
    "div",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && !p.to_string_lossy().ends_with("_tests.rs")
        {
            out.push(p);
        }
    }
}

/// Names of `</name>` literals: a lowercase letter, then letters, digits, `_` or `-`.
fn closing_tags(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("</") {
        rest = &rest[i + 2..];
        let len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
            .unwrap_or(rest.len());
        let name = &rest[..len];
        if rest[len..].starts_with('>') && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push(name);
        }
    }
    out
}

#[test]
fn every_framework_block_tag_is_neutralized() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for c in [
        "antler-agent",
        "antler-middleware",
        "antler-tools",
        "antler-runtime",
    ] {
        sources(&crates.join(c).join("src"), &mut files);
    }
    assert!(files.len() > 20);
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for tag in closing_tags(&text) {
            if !BLOCKED_TAGS.contains(&tag) && !NOT_BLOCKS.contains(&tag) {
                missing.push(format!("{tag} ({})", f.display()));
            }
        }
    }
    assert!(missing.is_empty(), "unclassified block tags: {missing:?}");
}
