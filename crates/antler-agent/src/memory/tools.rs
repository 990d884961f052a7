//! The memory tools of tool mode (spec 40 §4.9): `memory_search`, `memory_add`,
//! `memory_update`, `memory_delete`.
//!
//! With `memory.mode: tool` the lead agent reads and writes its facts itself instead of the
//! passive writer extracting them after each run. Every tool works on the bucket of the run's
//! user and agent (`RunContext::user_id`, `RunOptions::agent_name` — the same scope the
//! injection and the passive writer use) and answers with a JSON string; failures are JSON
//! `{"error": …}` results the model can read, never a failed tool call.
//!
//! Search has no separate index: a bucket holds at most `max_facts` (≤ 500) facts, loaded from
//! one SQLite read, so ranking them in memory costs less than keeping a derived FTS index in
//! step with every write. Matching follows DeerMem: the case-insensitive substring of the whole
//! query first; when nothing contains it, the query's words OR-ed as whole words (DeerMem's
//! tokenized FTS query), ranked by how many of them a fact contains.

use std::collections::BTreeSet;
use std::sync::Arc;

use antler_runtime::{
    Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, TypedSpec, TypedTool,
};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::document::Fact;
use super::{MemoryManager, MemoryOpError};

/// `memory_search`.
pub const SEARCH: &str = "memory_search";
/// `memory_add`.
pub const ADD: &str = "memory_add";
/// `memory_update`.
pub const UPDATE: &str = "memory_update";
/// `memory_delete`.
pub const DELETE: &str = "memory_delete";

/// The four tool names, in registration order.
pub const NAMES: [&str; 4] = [SEARCH, ADD, UPDATE, DELETE];

const SEARCH_DESCRIPTION: &str = "Look up what is remembered about the user: preferences, corrections, background and other stored facts.

Search before you assume something is unknown. Matching is case-insensitive: facts containing the whole query come first; otherwise facts containing any of its words (whole words), those with more of them first.

Returns JSON {\"results\": [...], \"count\": n}; each result has id, content, category, confidence, createdAt and source. Use a result's id with memory_update or memory_delete.";

const ADD_DESCRIPTION: &str = "Remember a new fact about the user for future conversations: a stated preference, a correction of your work, personal or work background, durable project context.

Store only stable, specific statements, not this task's details. A fact whose content already exists (ignoring case) is refused; to refine an existing fact use memory_update instead.

Returns JSON {\"fact_id\": ..., \"status\": \"added\"}, or {\"error\": ...}.";

const UPDATE_DESCRIPTION: &str = "Change a stored fact that is outdated or imprecise. Only the fields you pass change. Find the fact_id with memory_search first.

Returns JSON {\"fact_id\": ..., \"status\": \"updated\"}, or {\"error\": ...}.";

const DELETE_DESCRIPTION: &str = "Forget a stored fact that is clearly wrong or no longer relevant. Find the fact_id with memory_search first.

Returns JSON {\"fact_id\": ..., \"status\": \"deleted\"}, or {\"error\": ...}.";

fn default_limit() -> u32 {
    10
}

fn default_category() -> String {
    "context".to_owned()
}

fn default_confidence() -> f64 {
    0.7
}

/// `memory_search` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// What to look for, in natural language or as keywords.
    query: String,
    /// Return only facts with exactly this category (e.g. preference, correction, context).
    #[serde(default)]
    category: Option<String>,
    /// The most results to return (default 10).
    #[serde(default = "default_limit")]
    limit: u32,
}

/// `memory_add` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct AddArgs {
    /// The fact, specific and self-contained.
    content: String,
    /// Its category (default context), e.g. preference, correction, behavior, goal, knowledge.
    #[serde(default = "default_category")]
    category: String,
    /// How sure you are, 0 to 1 (default 0.7): higher for what the user said outright.
    #[serde(default = "default_confidence")]
    confidence: f64,
}

/// `memory_update` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct UpdateArgs {
    /// The fact's id, from memory_search.
    fact_id: String,
    /// The new text (unchanged when omitted).
    #[serde(default)]
    content: Option<String>,
    /// The new category (unchanged when omitted).
    #[serde(default)]
    category: Option<String>,
    /// The new confidence, 0 to 1 (unchanged when omitted).
    #[serde(default)]
    confidence: Option<f64>,
}

/// `memory_delete` arguments.
#[derive(Deserialize, JsonSchema)]
pub struct DeleteArgs {
    /// The fact's id, from memory_search.
    fact_id: String,
}

fn answer(v: Value) -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::text(v.to_string()))
}

fn refusal(e: &MemoryOpError) -> Result<ToolOutput, ToolError> {
    if matches!(e, MemoryOpError::Store(_) | MemoryOpError::Conflict) {
        tracing::warn!(error = %e, "memory tool failed");
    }
    answer(json!({"error": e.to_string()}))
}

/// `{"fact_id": …, "status": status}` for the changed fact's id, or the refusal.
fn fact_status(
    changed: Result<String, MemoryOpError>,
    status: &str,
) -> Result<ToolOutput, ToolError> {
    match changed {
        Ok(fact_id) => answer(json!({"fact_id": fact_id, "status": status})),
        Err(e) => refusal(&e),
    }
}

/// The run's scope: `(user_id, agent_name)`.
fn scope<'a>(ctx: &ToolContext<'a>) -> (Option<&'a str>, Option<&'a str>) {
    (
        ctx.run.user_id.as_deref(),
        ctx.run.options.agent_name.as_deref(),
    )
}

/// Lowercased words of a query (letters and digits; a CJK character is a word of its own).
fn words(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut cur = String::new();
    let is_cjk = |c: char| {
        ('\u{4e00}'..='\u{9fff}').contains(&c)
            || ('\u{3040}'..='\u{30ff}').contains(&c)
            || ('\u{ac00}'..='\u{d7a3}').contains(&c)
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !cur.is_empty() {
                out.insert(std::mem::take(&mut cur));
            }
            out.insert(c.to_string());
        } else if c.is_alphanumeric() {
            cur.extend(c.to_lowercase());
        } else if !cur.is_empty() {
            out.insert(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.insert(cur);
    }
    out
}

/// Rank a bucket's facts for `query` (see the module doc): category filter first, then the
/// whole-query substring matches by confidence, else word matches by count then confidence.
pub fn rank(facts: Vec<Fact>, query: &str, category: Option<&str>, limit: usize) -> Vec<Fact> {
    let needle = query.trim().to_lowercase();
    if needle.is_empty() || limit == 0 {
        return Vec::new();
    }
    let pool: Vec<(Fact, String)> = facts
        .into_iter()
        .filter(|f| category.is_none_or(|c| f.category.as_deref() == Some(c)))
        .filter_map(|f| {
            let text = f.text()?.to_lowercase();
            Some((f, text))
        })
        .collect();
    let mut hits: Vec<(usize, Fact)> = pool
        .iter()
        .filter(|(_, text)| text.contains(&needle))
        .map(|(f, _)| (1, f.clone()))
        .collect();
    if hits.is_empty() {
        let terms = words(&needle);
        hits = pool
            .into_iter()
            .filter_map(|(f, text)| {
                // Whole words, as an FTS index matches tokens ("is" does not hit "this").
                let n = words(&text).intersection(&terms).count();
                (n > 0).then_some((n, f))
            })
            .collect();
    }
    // Stable: ties keep storage (age) order.
    hits.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.confidence().total_cmp(&a.1.confidence()))
    });
    hits.into_iter().take(limit).map(|(_, f)| f).collect()
}

/// One memory tool: its spec and the manager it writes to; what it does is its arguments'
/// [`MemoryAction`].
pub struct MemoryTool<A> {
    spec: TypedSpec<A>,
    memory: Arc<MemoryManager>,
}

/// `memory_search`.
pub type SearchTool = MemoryTool<SearchArgs>;
/// `memory_add`.
pub type AddTool = MemoryTool<AddArgs>;
/// `memory_update`.
pub type UpdateTool = MemoryTool<UpdateArgs>;
/// `memory_delete`.
pub type DeleteTool = MemoryTool<DeleteArgs>;

/// The bucket a memory tool works on: the run's user and agent in `memory`.
pub struct Bucket<'a> {
    memory: &'a MemoryManager,
    user: Option<&'a str>,
    agent: Option<&'a str>,
}

/// What a memory tool does with its arguments.
#[async_trait]
pub trait MemoryAction: DeserializeOwned + JsonSchema + Send + Sync + 'static {
    async fn apply(self, at: Bucket<'_>) -> Result<ToolOutput, ToolError>;
}

#[async_trait]
impl<A: MemoryAction> TypedTool for MemoryTool<A> {
    type Args = A;

    fn typed_spec(&self) -> &TypedSpec<A> {
        &self.spec
    }

    async fn invoke(&self, args: A, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let (user, agent) = scope(&ctx);
        let at = Bucket {
            memory: &self.memory,
            user,
            agent,
        };
        args.apply(at).await
    }
}

#[async_trait]
impl MemoryAction for SearchArgs {
    async fn apply(self, at: Bucket<'_>) -> Result<ToolOutput, ToolError> {
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        match at
            .memory
            .search(
                at.user,
                at.agent,
                &self.query,
                self.category.as_deref(),
                limit,
            )
            .await
        {
            Ok(results) => answer(json!({"count": results.len(), "results": results})),
            Err(e) => refusal(&MemoryOpError::Store(e)),
        }
    }
}

#[async_trait]
impl MemoryAction for AddArgs {
    async fn apply(self, at: Bucket<'_>) -> Result<ToolOutput, ToolError> {
        if self.content.trim().is_empty() {
            return answer(json!({"error": "empty content"}));
        }
        // The duplicate check runs inside the write (over the whole bucket, on every retry), so
        // two concurrent calls cannot both store the same content.
        let created = at
            .memory
            .create_fact(
                at.user,
                at.agent,
                &self.content,
                &self.category,
                self.confidence,
            )
            .await;
        fact_status(created.map(|fact| fact.id), "added")
    }
}

#[async_trait]
impl MemoryAction for UpdateArgs {
    async fn apply(self, at: Bucket<'_>) -> Result<ToolOutput, ToolError> {
        let updated = at
            .memory
            .update_fact(
                at.user,
                at.agent,
                &self.fact_id,
                self.content.as_deref(),
                self.category.as_deref(),
                self.confidence,
            )
            .await;
        fact_status(updated.map(|_| self.fact_id), "updated")
    }
}

#[async_trait]
impl MemoryAction for DeleteArgs {
    async fn apply(self, at: Bucket<'_>) -> Result<ToolOutput, ToolError> {
        let deleted = at
            .memory
            .delete_fact(at.user, at.agent, &self.fact_id)
            .await;
        fact_status(deleted.map(|()| self.fact_id), "deleted")
    }
}

fn tool<A: MemoryAction>(
    name: &str,
    description: &str,
    memory: &Arc<MemoryManager>,
) -> Arc<dyn Tool> {
    Arc::new(MemoryTool::<A> {
        spec: TypedSpec::new(name, description),
        memory: memory.clone(),
    })
}

/// The four memory tools, writing to `memory`.
pub fn memory_tools(memory: &Arc<MemoryManager>) -> Vec<Arc<dyn Tool>> {
    vec![
        tool::<SearchArgs>(SEARCH, SEARCH_DESCRIPTION, memory),
        tool::<AddArgs>(ADD, ADD_DESCRIPTION, memory),
        tool::<UpdateArgs>(UPDATE, UPDATE_DESCRIPTION, memory),
        tool::<DeleteArgs>(DELETE, DELETE_DESCRIPTION, memory),
    ]
}

/// Append the memory tools to `reg`; a name already taken keeps its tool (warned), and
/// nothing else in `reg` changes.
pub fn append(reg: &mut ToolRegistry, tools: Vec<Arc<dyn Tool>>) {
    for tool in tools {
        if reg.get(tool.name()).is_some() {
            tracing::warn!(tool = %tool.name(), "a tool with this memory tool's name exists; memory tool skipped");
            continue;
        }
        reg.register(tool);
    }
}

/// The static system-prompt section of tool mode.
pub const PROMPT_SECTION: &str = "<memory_tool_system>
Long-term memory is in tool mode: the <memory> block, when present, holds only the user and history summaries; remembered facts are not shown to you until you search for them. Keep the user's memory accurate with the memory tools:
- `memory_search` whenever earlier preferences, corrections, constraints or background could matter. Never conclude that something is not remembered before searching for it.
- `memory_add` only for stable facts that will help in future conversations: explicit preferences, corrections, personal or work background, lasting project context.
- `memory_update` when a stored fact is outdated or imprecise; update it rather than adding a near-duplicate.
- `memory_delete` only for a fact that is clearly wrong or no longer relevant.
</memory_tool_system>";

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
