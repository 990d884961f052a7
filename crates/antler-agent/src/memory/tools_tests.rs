#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use antler_protocol::{Content, Object, ThreadState};
use antler_runtime::{NullSink, RunContext, Tool, ToolContext, ToolOutput};
use antler_store::SqliteStore;
use serde_json::{json, Value};

use super::*;
use crate::memory::{MemorySettings, ModelSource};

struct Fixture {
    _dir: tempfile::TempDir,
    memory: Arc<MemoryManager>,
    tools: Vec<Arc<dyn Tool>>,
}

fn fixture(settings: MemorySettings) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("antler.db")).unwrap();
    let model = antler_models::ScriptedModel::new([]);
    let memory = MemoryManager::new(store, settings, ModelSource::Fixed(Arc::new(model)));
    let tools = memory_tools(&memory);
    Fixture {
        _dir: dir,
        memory,
        tools,
    }
}

impl Fixture {
    /// Call tool `name` as `user` running agent `agent`; the JSON it answered.
    async fn call_as(&self, user: &str, agent: Option<&str>, name: &str, args: Value) -> Value {
        let tool = self.tools.iter().find(|t| t.name() == name).unwrap();
        let mut run = RunContext::new("t1", "r1", Arc::new(NullSink)).with_user(Some(user.into()));
        run.options.agent_name = agent.map(str::to_owned);
        let state = ThreadState::default();
        let args: Object = match args {
            Value::Object(o) => o,
            _ => Object::new(),
        };
        let out = tool
            .call(
                args,
                ToolContext {
                    call_id: "c1",
                    state: &state,
                    run: &run,
                },
            )
            .await
            .unwrap();
        match out {
            ToolOutput::Content {
                content: Content::Text(t),
                ..
            } => serde_json::from_str(&t).unwrap(),
            other => panic!("unexpected output {other:?}"),
        }
    }

    async fn call(&self, name: &str, args: Value) -> Value {
        self.call_as("alice", None, name, args).await
    }

    async fn add(&self, content: &str, category: &str, confidence: f64) -> String {
        let v = self
            .call(
                ADD,
                json!({"content": content, "category": category, "confidence": confidence}),
            )
            .await;
        assert_eq!(v["status"], "added", "{v}");
        v["fact_id"].as_str().unwrap().to_owned()
    }
}

#[tokio::test]
async fn four_uniquely_named_tools() {
    let f = fixture(MemorySettings::default());
    let names: Vec<&str> = f.tools.iter().map(|t| t.name()).collect();
    assert_eq!(names, NAMES);
}

#[tokio::test]
async fn appending_skips_taken_names_and_keeps_everything_else() {
    let f = fixture(MemorySettings::default());
    let mine = antler_tools::write_todos::write_todos_tool();
    // A foreign tool that happens to be called memory_add.
    let foreign: Arc<dyn Tool> = Arc::new(DeleteTool {
        spec: TypedSpec::new(ADD, "someone else's"),
        memory: f.memory.clone(),
    });
    let mut reg = antler_runtime::ToolRegistry::new();
    reg.register(mine);
    reg.register(foreign);
    append(&mut reg, memory_tools(&f.memory));
    let names: Vec<&str> = reg.names().collect();
    assert_eq!(names, ["write_todos", ADD, SEARCH, UPDATE, DELETE]);
    assert_eq!(reg.get(ADD).unwrap().spec().description, "someone else's");
}

#[tokio::test]
async fn an_added_fact_is_found_with_its_public_shape_in_the_runs_scope_only() {
    let f = fixture(MemorySettings::default());
    let id = f.add("Prefers tea over coffee", "preference", 0.9).await;
    assert!(id.starts_with("fact_"), "{id}");

    let v = f.call(SEARCH, json!({"query": "TEA"})).await;
    assert_eq!(v["count"], 1, "{v}");
    let hit = &v["results"][0];
    assert_eq!(hit["id"], json!(id));
    assert_eq!(hit["content"], "Prefers tea over coffee");
    assert_eq!(hit["category"], "preference");
    assert_eq!(hit["confidence"], 0.9);
    assert_eq!(hit["source"], "manual");
    assert!(hit["createdAt"].as_str().is_some_and(|s| !s.is_empty()));

    // Another user, and another agent of the same user, see nothing.
    let other_user = f
        .call_as("bob", None, SEARCH, json!({"query": "tea"}))
        .await;
    assert_eq!(other_user, json!({"count": 0, "results": []}));
    let other_agent = f
        .call_as("alice", Some("Researcher"), SEARCH, json!({"query": "tea"}))
        .await;
    assert_eq!(other_agent["count"], 0);
    // A custom agent writes to its own (lowercased) bucket.
    f.call_as(
        "alice",
        Some("Researcher"),
        ADD,
        json!({"content": "Cites primary sources"}),
    )
    .await;
    let doc = f
        .memory
        .document(Some("alice"), Some("researcher"))
        .await
        .unwrap();
    assert_eq!(doc.facts.len(), 1);
    assert_eq!(doc.facts[0].category.as_deref(), Some("context"));
    assert_eq!(doc.facts[0].confidence, json!(0.7));
}

#[tokio::test]
async fn duplicates_are_refused_case_insensitively_even_beyond_the_top_k() {
    let f = fixture(MemorySettings::default());
    for i in 0..12 {
        f.add(&format!("Likes topic number {i}"), "context", 0.9)
            .await;
    }
    f.add("likes TOPIC number 99", "context", 0.75).await;
    // The duplicate ranks outside a top-1 search…
    let top = f.call(SEARCH, json!({"query": "topic", "limit": 1})).await;
    assert_eq!(top["count"], 1);
    assert_ne!(top["results"][0]["content"], "likes TOPIC number 99");
    // …and is still caught.
    let v = f
        .call(ADD, json!({"content": "  Likes Topic Number 99 "}))
        .await;
    assert_eq!(v, json!({"error": "Duplicate fact"}));
}

#[tokio::test]
async fn bad_additions_are_json_errors() {
    let f = fixture(MemorySettings::default());
    assert_eq!(
        f.call(ADD, json!({"content": "   "})).await,
        json!({"error": "empty content"})
    );
    let v = f
        .call(ADD, json!({"content": "x", "confidence": 1.5}))
        .await;
    assert!(v["error"].as_str().unwrap().contains("confidence"), "{v}");
}

#[tokio::test]
async fn a_fact_that_capacity_would_evict_is_reported_not_stored() {
    let f = fixture(MemorySettings {
        max_facts: 2,
        ..Default::default()
    });
    f.add("a", "context", 0.9).await;
    f.add("b", "context", 0.9).await;
    let v = f
        .call(ADD, json!({"content": "c", "confidence": 0.5}))
        .await;
    assert!(v["error"].as_str().unwrap().contains("not stored"), "{v}");
    // A more confident one displaces the weakest instead.
    let v = f
        .call(ADD, json!({"content": "d", "confidence": 0.95}))
        .await;
    assert_eq!(v["status"], "added");
    assert_eq!(
        f.memory
            .document(Some("alice"), None)
            .await
            .unwrap()
            .facts
            .len(),
        2
    );
}

#[tokio::test]
async fn update_and_delete_change_the_fact_or_say_it_is_not_found() {
    let f = fixture(MemorySettings::default());
    let id = f.add("Works in Berlin", "context", 0.8).await;
    let v = f
        .call(UPDATE, json!({"fact_id": id, "content": "Works in Munich"}))
        .await;
    assert_eq!(v, json!({"fact_id": id, "status": "updated"}));
    let doc = f.memory.document(Some("alice"), None).await.unwrap();
    assert_eq!(doc.facts[0].content, json!("Works in Munich"));
    // Omitted fields stay.
    assert_eq!(doc.facts[0].confidence, json!(0.8));
    assert_eq!(doc.facts[0].category.as_deref(), Some("context"));

    assert_eq!(
        f.call(UPDATE, json!({"fact_id": "fact_nope", "confidence": 0.9}))
            .await,
        json!({"error": "Fact not found: fact_nope"})
    );
    assert_eq!(
        f.call(DELETE, json!({"fact_id": "fact_nope"})).await,
        json!({"error": "Fact not found: fact_nope"})
    );
    // Another user cannot touch it.
    assert_eq!(
        f.call_as("bob", None, DELETE, json!({"fact_id": id})).await,
        json!({"error": format!("Fact not found: {id}")})
    );
    assert_eq!(
        f.call(DELETE, json!({"fact_id": id})).await,
        json!({"fact_id": id, "status": "deleted"})
    );
    assert!(f
        .memory
        .document(Some("alice"), None)
        .await
        .unwrap()
        .facts
        .is_empty());
}

#[tokio::test]
async fn the_category_filter_applies_before_the_top_k_cut() {
    let f = fixture(MemorySettings::default());
    f.add("Drinks tea in the morning", "context", 0.99).await;
    f.add("Drinks tea at work", "context", 0.98).await;
    f.add("Prefers green tea", "preference", 0.71).await;
    let v = f
        .call(
            SEARCH,
            json!({"query": "tea", "category": "preference", "limit": 1}),
        )
        .await;
    assert_eq!(v["count"], 1, "{v}");
    assert_eq!(v["results"][0]["content"], "Prefers green tea");
    // Without the filter the most confident come first.
    let v = f.call(SEARCH, json!({"query": "tea", "limit": 2})).await;
    assert_eq!(v["results"][0]["content"], "Drinks tea in the morning");
    assert_eq!(v["results"][1]["content"], "Drinks tea at work");
}

#[test]
fn ranking_falls_back_to_words_when_no_fact_contains_the_whole_query() {
    let fact = |id: &str, content: &str, confidence: f64| Fact {
        id: id.into(),
        content: json!(content),
        category: Some("context".into()),
        confidence: json!(confidence),
        ..Default::default()
    };
    let facts = vec![
        fact("a", "Uses Rust for backend services", 0.7),
        fact("b", "Prefers Python for scripts", 0.9),
        fact("c", "Writes Rust and Python", 0.6),
        fact("d", "Lives in Paris", 1.0),
    ];
    // No fact contains "rust python": the one with both words first, then by confidence.
    let ids: Vec<String> = rank(facts.clone(), "Rust, Python?", None, 10)
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(ids, ["c", "b", "a"]);
    // A whole-query match wins over word matches.
    let ids: Vec<String> = rank(facts.clone(), "rust for", None, 10)
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(ids, ["a"]);
    // Words match whole: "use" is not "uses", "in" is not "Writes".
    let ids: Vec<String> = rank(facts.clone(), "use in", None, 10)
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(ids, ["d"]);
    assert!(rank(facts.clone(), "  ", None, 10).is_empty());
    assert!(rank(facts.clone(), "rust", None, 0).is_empty());
    assert!(rank(facts, "rust", Some("preference"), 10).is_empty());
    assert_eq!(
        words("喜欢 Tea-time"),
        ["time", "tea", "喜", "欢"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

#[tokio::test]
async fn tool_mode_injects_summaries_but_not_facts() {
    let f = fixture(MemorySettings {
        token_counting: "char".into(),
        mode: antler_config::MemoryMode::Tool,
        ..Default::default()
    });
    f.add("Prefers tea", "preference", 0.9).await;
    f.memory
        .import(
            Some("alice"),
            None,
            crate::memory::document::MemoryDocument {
                user: crate::memory::document::UserSections {
                    work_context: crate::memory::document::Section {
                        summary: "Backend engineer".into(),
                        updated_at: String::new(),
                    },
                    ..Default::default()
                },
                facts: f.memory.document(Some("alice"), None).await.unwrap().facts,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let text = f
        .memory
        .context(Some("alice"), None)
        .await
        .unwrap()
        .unwrap();
    assert!(text.contains("- Work: Backend engineer"), "{text}");
    assert!(!text.contains("tea") && !text.contains("Facts:"), "{text}");

    // Middleware mode shows both.
    let s = MemorySettings::default();
    assert!(!s.tool_mode());
    let mut tool_off = s.clone();
    tool_off.mode = antler_config::MemoryMode::Tool;
    tool_off.enabled = false;
    assert!(!tool_off.tool_mode(), "disabled memory never has tool mode");
}
