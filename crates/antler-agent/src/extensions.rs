//! Extension middlewares: your own [`Middleware`]s placed into the chains antler builds.
//!
//! DeerFlow loads extra middlewares from Python class paths (`extensions.middlewares` in
//! `config.yaml` or `middlewares` in `extensions_config.json`, chain slots L18/U8) and takes
//! programmatic ones from an embedding client (L17). antler cannot load Python; the Rust
//! equivalent is this API: register an [`Extension`] on the [`App`] and every chain built
//! afterwards has it, at its [`Placement`]. The Python entries a config names are skipped with a
//! warning ([`App::skipped_python_middlewares`]).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use antler_agent::App;
//! # use antler_agent::extensions::{Extension, Placement};
//! # use antler_runtime::{HookSet, Middleware};
//! # struct Audit;
//! # #[async_trait::async_trait]
//! # impl Middleware for Audit {
//! #     fn name(&self) -> &str { "Audit" }
//! #     fn hooks(&self) -> HookSet { HookSet::WRAP_TOOL }
//! # }
//! # fn demo(app: App) -> Result<App, Box<dyn std::error::Error>> {
//! let app = app
//!     // Just inside the loop guard: sees every model response LoopDetection saw.
//!     .with_middleware(Placement::after("L15"), Audit)?
//!     // DeerFlow's custom-middleware slot, in the lead agent and every subagent.
//!     .with_extension(Extension::new(Placement::Default, Arc::new(Audit2)).in_subagents())?;
//! # Ok(app) }
//! # struct Audit2;
//! # #[async_trait::async_trait]
//! # impl Middleware for Audit2 {
//! #     fn name(&self) -> &str { "Audit2" }
//! #     fn hooks(&self) -> HookSet { HookSet::AFTER_MODEL }
//! # }
//! ```
//!
//! DeerFlow's extension-API positions are there too, resolved per chain:
//! [`Placement::Semantic`] with [`Semantic::ModelLogical`] (outside LLMErrorHandling),
//! [`Semantic::ModelPhysical`] (innermost model position), [`Semantic::ToolVisible`] (start of
//! the chain), [`Semantic::ToolRaw`] (just outside Clarification) or [`Semantic::Standard`].
//!
//! **Anchors** are slot labels of spec 20 §12 (`S1`…`S14` shared, `L1`…`L22` lead, `U1`…`U13`
//! subagent; `antler chain` prints them) or the name of an extension registered earlier. A slot
//! that is not in a given chain (a disabled middleware, e.g. `L6` outside plan mode) still anchors:
//! the extension goes where that slot would be. An unknown anchor is an error when the extension
//! is registered, naming the anchor.
//!
//! **Order rules** (spec 20 §12.5, §13), checked on every built chain — a violation fails the
//! build and names the extension:
//! - Clarification (`L22`) stays last in the lead chain;
//! - InputSanitization (`S1`) stays the outermost model wrapper;
//! - SkillActivation, SkillToolPolicy and DurableContext (`L2`, `L3`, `L4`; `U1`, `U2`) stay
//!   adjacent — the activation hands the policy an authenticated value within one model call.
//!
//! Remember the hook order when choosing a slot: `before_*` hooks run in list order, `after_*`
//! hooks in reverse, and the first wrapper is the outermost (so `Placement::before("S8")` sees one
//! logical model call however often LLMErrorHandling retries, and `Placement::after("L21")`
//! sees a response before SafetyFinishReason repaired it). A middleware that adds system
//! messages belongs before `L13`/`U13` (SystemMessageCoalescing).
//!
//! One instance serves every run (and, with [`Extension::in_subagents`], every delegation):
//! keep per-run state in the run's scratchpad ([`antler_runtime::RunKey`]), not in `self`.

use std::path::PathBuf;
use std::sync::Arc;

use antler_runtime::{HookSet, Middleware};
use serde_json::Value;

use crate::chain::ChainEntry;
use crate::App;

/// Where an extension goes in a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// DeerFlow's custom-middleware position: after every built-in guard and before the
    /// terminal tail — before TerminalResponse (`L19`) in the lead chain, before
    /// SafetyFinishReason (`U9`) in a subagent's. Several go in registration order.
    Default,
    /// Just before (outer of) the anchor.
    Before(String),
    /// Just after (inner of) the anchor.
    After(String),
    /// One of DeerFlow's extension-API positions, resolved per chain (spec 20 §12.5).
    Semantic(Semantic),
}

/// The positions DeerFlow's extension API offers plugins, by what the middleware needs to see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Semantic {
    /// Just outside LLMErrorHandling (`S8`): one logical model call, however often it is retried.
    ModelLogical,
    /// Innermost model position: inside SafetyFinishReason (`L21`) in the lead chain, inside
    /// SystemMessageCoalescing (`U13`) in a subagent's — each physical request as sent.
    ModelPhysical,
    /// Start of the chain: outermost tool wrapper, sees every call as the model made it.
    ToolVisible,
    /// Just outside Clarification (`L22`; the end of a subagent's chain): the raw tool results.
    ToolRaw,
    /// DeerFlow's default for plugins: just outside LLMErrorHandling (`S8`).
    Standard,
}

impl Placement {
    pub fn before(anchor: impl Into<String>) -> Placement {
        Placement::Before(anchor.into())
    }

    pub fn after(anchor: impl Into<String>) -> Placement {
        Placement::After(anchor.into())
    }

    fn anchor(&self) -> Option<&str> {
        match self {
            Placement::Default | Placement::Semantic(_) => None,
            Placement::Before(a) | Placement::After(a) => Some(a),
        }
    }

    /// The anchor slot (or extension name) in a chain of `segment`, and whether the extension
    /// goes after it (inner) rather than before it (outer).
    pub fn target(&self, segment: Segment) -> (&str, bool) {
        match (self, segment) {
            // Before the terminal tail; several defaults keep registration order.
            (Placement::Default, Segment::Lead) => ("L19", false),
            (Placement::Default, Segment::Subagent) => ("U9", false),
            (Placement::Before(a), _) => (a, false),
            (Placement::After(a), _) => (a, true),
            (Placement::Semantic(Semantic::ModelLogical | Semantic::Standard), _) => ("S8", false),
            (Placement::Semantic(Semantic::ModelPhysical), Segment::Lead) => ("L21", true),
            (
                Placement::Semantic(Semantic::ModelPhysical | Semantic::ToolRaw),
                Segment::Subagent,
            ) => ("U13", true),
            (Placement::Semantic(Semantic::ToolVisible), _) => ("S1", false),
            (Placement::Semantic(Semantic::ToolRaw), Segment::Lead) => ("L22", false),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Default => f.write_str("default"),
            Placement::Semantic(s) => write!(f, "{s:?}"),
            Placement::Before(a) => write!(f, "before {a}"),
            Placement::After(a) => write!(f, "after {a}"),
        }
    }
}

/// Which chain a slot label or an extension belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    Lead,
    Subagent,
}

impl Segment {
    fn as_str(self) -> &'static str {
        match self {
            Segment::Lead => "lead",
            Segment::Subagent => "subagent",
        }
    }
}

/// Every slot of a chain, in DeerFlow's order (spec 20 §12.1–§12.3), present or not.
pub fn slots(segment: Segment) -> &'static [&'static str] {
    const LEAD: &[&str] = &[
        "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "S13", "S14",
        "L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8", "L9", "L10", "L11", "L12", "L13", "L14",
        "L15", "L16", "L17", "L18", "L19", "L20", "L21", "L22",
    ];
    const SUBAGENT: &[&str] = &[
        "S1", "S2", "S3", "S4", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "S13", "S14", "U1",
        "U2", "U3", "U4", "U5", "U6", "U7", "U8", "U9", "U10", "U11", "U12", "U13",
    ];
    match segment {
        Segment::Lead => LEAD,
        Segment::Subagent => SUBAGENT,
    }
}

/// The slot label extension entries carry in a chain (`antler chain` prints it): DeerFlow's
/// custom slot for [`Placement::Default`], `ext` otherwise.
fn label(placement: &Placement, segment: Segment) -> &'static str {
    match (placement, segment) {
        (Placement::Default, Segment::Lead) => "L17",
        (Placement::Default, Segment::Subagent) => "U8",
        _ => EXT_SLOT,
    }
}

/// Slot label of an extension placed at an anchor.
pub const EXT_SLOT: &str = "ext";

/// A middleware to insert, where, and into which chains.
#[derive(Clone)]
pub struct Extension {
    placement: Placement,
    middleware: Arc<dyn Middleware>,
    lead: bool,
    subagents: bool,
}

impl Extension {
    /// An extension of the lead agent's chain.
    pub fn new(placement: Placement, middleware: Arc<dyn Middleware>) -> Extension {
        Extension {
            placement,
            middleware,
            lead: true,
            subagents: false,
        }
    }

    /// Also insert it into every subagent's chain (its anchor must be in both).
    pub fn in_subagents(mut self) -> Extension {
        self.subagents = true;
        self
    }

    /// Insert it into subagents' chains only.
    pub fn only_in_subagents(mut self) -> Extension {
        self.lead = false;
        self.subagents = true;
        self
    }

    pub fn name(&self) -> &str {
        self.middleware.name()
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    fn applies_to(&self, segment: Segment) -> bool {
        match segment {
            Segment::Lead => self.lead,
            Segment::Subagent => self.subagents,
        }
    }
}

/// An extension that cannot be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExtensionError {
    #[error("extension '{extension}': unknown slot '{anchor}' for the {segment} chain — use one of {known}, or the name of an extension registered earlier")]
    UnknownSlot {
        extension: String,
        anchor: String,
        segment: &'static str,
        known: String,
    },
    #[error("extension '{0}': a middleware or extension of that name is already registered — every middleware in a chain needs a unique name")]
    DuplicateName(String),
    #[error("extension '{extension}' ({placement}): {rule}")]
    Ordering {
        extension: String,
        placement: String,
        rule: String,
    },
}

/// Check `ext` against the slots of its chains and the extensions registered before it.
pub fn validate(ext: &Extension, earlier: &[Extension]) -> Result<(), ExtensionError> {
    if earlier.iter().any(|e| e.name() == ext.name()) {
        return Err(ExtensionError::DuplicateName(ext.name().to_owned()));
    }
    let Some(anchor) = ext.placement.anchor() else {
        return Ok(());
    };
    for segment in [Segment::Lead, Segment::Subagent] {
        if !ext.applies_to(segment) || slots(segment).contains(&anchor) {
            continue;
        }
        let by_name = earlier
            .iter()
            .any(|e| e.name() == anchor && e.applies_to(segment));
        if !by_name {
            return Err(unknown_slot(ext, anchor, segment));
        }
    }
    if ext.lead && matches!(&ext.placement, Placement::After(a) if a == "L22") {
        return Err(ordering(
            ext,
            "ClarificationMiddleware (L22) must stay last in the lead chain",
        ));
    }
    Ok(())
}

fn ordering(ext: &Extension, rule: &str) -> ExtensionError {
    ExtensionError::Ordering {
        extension: ext.name().to_owned(),
        placement: ext.placement.to_string(),
        rule: rule.to_owned(),
    }
}

/// Whether a chain entry is an extension (built-ins never use these labels: L17, L18 and U8 are
/// the custom and configured slots, which antler fills only with extensions).
pub fn is_extension(entry: &ChainEntry) -> bool {
    matches!(entry.slot, "L17" | "L18" | "U8" | EXT_SLOT)
}

/// Where a slot that is not in `entries` would be: before the first built-in entry whose slot
/// comes after it in DeerFlow's order (the end when none does).
pub fn position_of_absent(entries: &[ChainEntry], segment: Segment, slot: &str) -> usize {
    let order = slots(segment);
    let rank = |s: &str| order.iter().position(|o| *o == s);
    let Some(target) = rank(slot) else {
        return entries.len();
    };
    entries
        .iter()
        .position(|e| !is_extension(e) && rank(e.slot).is_some_and(|r| r > target))
        .unwrap_or(entries.len())
}

fn unknown_slot(ext: &Extension, anchor: &str, segment: Segment) -> ExtensionError {
    let all = slots(segment);
    ExtensionError::UnknownSlot {
        extension: ext.name().to_owned(),
        anchor: anchor.to_owned(),
        segment: segment.as_str(),
        known: format!("{}…{}", all[0], all[all.len() - 1]),
    }
}

/// `entries` with the extensions of `segment` inserted, in registration order, then the order
/// rules checked.
pub fn apply(
    mut entries: Vec<ChainEntry>,
    extensions: &[Extension],
    segment: Segment,
) -> Result<Vec<ChainEntry>, ExtensionError> {
    for ext in extensions.iter().filter(|e| e.applies_to(segment)) {
        if entries.iter().any(|e| e.middleware.name() == ext.name()) {
            return Err(ExtensionError::DuplicateName(ext.name().to_owned()));
        }
        let (anchor, after) = ext.placement.target(segment);
        let found = entries
            .iter()
            .position(|e| !is_extension(e) && e.slot == anchor)
            .or_else(|| {
                entries
                    .iter()
                    .position(|e| is_extension(e) && e.middleware.name() == anchor)
            });
        let at = match found {
            Some(i) if after => i + 1,
            Some(i) => i,
            None if slots(segment).contains(&anchor) => {
                tracing::debug!(
                    extension = ext.name(),
                    anchor,
                    "anchor slot is not in this chain; placed where it would be"
                );
                position_of_absent(&entries, segment, anchor)
            }
            None => return Err(unknown_slot(ext, anchor, segment)),
        };
        entries.insert(
            at,
            ChainEntry {
                slot: label(&ext.placement, segment),
                middleware: ext.middleware.clone(),
            },
        );
    }
    check_order(&entries, extensions, segment)?;
    Ok(entries)
}

/// Spec 20 §13's rules an insertion can break.
fn check_order(
    entries: &[ChainEntry],
    extensions: &[Extension],
    segment: Segment,
) -> Result<(), ExtensionError> {
    let ext_of = |e: &ChainEntry| {
        is_extension(e)
            .then(|| extensions.iter().find(|x| x.name() == e.middleware.name()))
            .flatten()
    };
    let builtin = |slot: &str| {
        entries
            .iter()
            .position(|e| !is_extension(e) && e.slot == slot)
    };
    if segment == Segment::Lead && builtin("L22").is_some() {
        if let Some(x) = entries.last().and_then(ext_of) {
            return Err(ordering(
                x,
                "ClarificationMiddleware (L22) must stay last in the lead chain",
            ));
        }
    }
    if let Some(s1) = builtin("S1") {
        let outer = entries[..s1]
            .iter()
            .filter(|e| e.middleware.hooks().contains(HookSet::WRAP_MODEL))
            .find_map(ext_of);
        if let Some(x) = outer {
            return Err(ordering(x, "InputSanitizationMiddleware (S1) must stay the outermost model wrapper, so every wrapper inside it sees the sanitized user text"));
        }
    }
    let pinned: &[(&str, &str)] = match segment {
        Segment::Lead => &[("L2", "L3"), ("L3", "L4")],
        Segment::Subagent => &[("U1", "U2")],
    };
    for (a, b) in pinned {
        if let (Some(i), Some(j)) = (builtin(a), builtin(b)) {
            if let Some(x) = entries[i + 1..j.max(i + 1)].iter().find_map(ext_of) {
                return Err(ordering(x, &format!("slots {a} and {b} must stay adjacent: SkillActivation hands SkillToolPolicy an authenticated value within one model call")));
            }
        }
    }
    Ok(())
}

/// A Python middleware a config names, which antler skips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedMiddleware {
    /// `module.path:ClassName`.
    pub class_path: String,
    /// Where it was named (`config.yaml extensions.middlewares` or the JSON file's path).
    pub source: String,
}

impl std::fmt::Display for SkippedMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "skipped Python middleware '{}' ({}): antler cannot load Python classes — port it to Rust and register it with App::with_middleware",
            self.class_path, self.source
        )
    }
}

fn entries_of(list: &Value, source: &str) -> Vec<SkippedMiddleware> {
    let items: Vec<String> = match list {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Value::Null => Vec::new(),
        other => vec![other.to_string()],
    };
    items
        .into_iter()
        .map(|class_path| SkippedMiddleware {
            class_path,
            source: source.to_owned(),
        })
        .collect()
}

/// The middlewares DeerFlow would load: `config.yaml` `extensions.middlewares` when it sets the
/// key (it overrides the JSON file's), else `extensions_config.json` `middlewares`.
pub fn configured_python_middlewares(
    config_extensions: Option<&Value>,
    extensions_file: Option<&std::path::Path>,
) -> Vec<SkippedMiddleware> {
    if let Some(list) = config_extensions.and_then(|e| e.get("middlewares")) {
        return entries_of(list, "config.yaml extensions.middlewares");
    }
    let Some(path) = extensions_file else {
        return Vec::new();
    };
    match antler_mcp::config::read_raw(path) {
        Ok(raw) => raw
            .get("middlewares")
            .map(|list| entries_of(list, &format!("{} middlewares", path.display())))
            .unwrap_or_default(),
        // The MCP loader reports an unreadable file; nothing to add here.
        Err(_) => Vec::new(),
    }
}

impl App {
    /// Insert `middleware` into the lead agent's chain at `placement` (see the [module
    /// docs](crate::extensions)). Fails on an unknown anchor or a duplicate name.
    pub fn with_middleware(
        self,
        placement: Placement,
        middleware: impl Middleware + 'static,
    ) -> Result<App, ExtensionError> {
        self.with_extension(Extension::new(placement, Arc::new(middleware)))
    }

    /// Register an extension (lead, subagents or both). Fails on an unknown anchor or a
    /// duplicate name; order rules are checked when a chain is built.
    pub fn with_extension(mut self, extension: Extension) -> Result<App, ExtensionError> {
        validate(&extension, &self.extensions)?;
        let mut all = self.extensions.to_vec();
        all.push(extension);
        self.extensions = all.into();
        Ok(self)
    }

    /// The registered extensions, in registration order.
    pub fn extensions(&self) -> &[Extension] {
        &self.extensions
    }

    /// The Python middlewares this app's config names and antler skips.
    pub fn skipped_python_middlewares(&self) -> Vec<SkippedMiddleware> {
        let file: Option<PathBuf> = self.mcp.lookup().resolve().ok().flatten();
        configured_python_middlewares(self.config.extensions.as_ref(), file.as_deref())
    }
}

#[cfg(test)]
#[path = "extensions_tests.rs"]
mod tests;
