//! The memory settings routes (spec 70 §3.4 G19) behind the [`MemoryApi`] trait, so the
//! long-term memory store can be plugged in without touching the routes.
//!
//! [`NoMemory`], the default, reports an empty memory and answers every change with 501 — what
//! the spec asks of a backend that cannot store facts.

use antler_config::MemoryConfig;
use async_trait::async_trait;
use serde_json::{json, Value};

pub use antler_protocol::api::{FactPatch, NewFact};

/// Why a memory call failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// 501: the backend cannot do this.
    #[error("{0}")]
    NotSupported(String),
    /// 404.
    #[error("Fact {0} not found")]
    NotFound(String),
    /// 409: duplicate or concurrent change.
    #[error("{0}")]
    Conflict(String),
    /// 422.
    #[error("{0}")]
    Invalid(String),
    /// 500.
    #[error("{0}")]
    Unavailable(String),
}

/// A user's long-term memory as the settings page sees it. Every mutating call returns the
/// whole `MemoryResponse`.
#[async_trait]
pub trait MemoryApi: Send + Sync {
    async fn get(&self, user_id: &str) -> Result<Value, MemoryError>;
    async fn clear(&self, user_id: &str) -> Result<Value, MemoryError>;
    async fn create_fact(&self, user_id: &str, fact: NewFact) -> Result<Value, MemoryError>;
    async fn update_fact(
        &self,
        user_id: &str,
        fact_id: &str,
        patch: FactPatch,
    ) -> Result<Value, MemoryError>;
    async fn delete_fact(&self, user_id: &str, fact_id: &str) -> Result<Value, MemoryError>;
    async fn export(&self, user_id: &str) -> Result<Value, MemoryError>;
    async fn import(&self, user_id: &str, data: Value) -> Result<Value, MemoryError>;
    async fn reload(&self, user_id: &str) -> Result<Value, MemoryError>;
    /// `GET /memory/config`.
    fn config(&self) -> Value;
}

/// An empty `MemoryResponse`.
pub fn empty_memory() -> Value {
    let section = || json!({"summary": "", "updatedAt": ""});
    json!({
        "version": "1.0",
        "revision": 0,
        "lastUpdated": "",
        "user": {"workContext": section(), "personalContext": section(), "topOfMind": section()},
        "history": {"recentMonths": section(), "earlierContext": section(), "longTermBackground": section()},
        "facts": [],
    })
}

/// `GET /memory/config` from `config.yaml`'s `memory:` section.
pub fn memory_config_json(m: &MemoryConfig) -> Value {
    json!({
        "enabled": m.enabled,
        "mode": serde_json::to_value(m.mode).unwrap_or(Value::Null),
        "injection_enabled": m.injection_enabled,
        "shutdown_flush_timeout_seconds": m.shutdown_flush_timeout_seconds,
        "manager_class": m.manager_class,
        "backend_config": {},
    })
}

/// No memory store: empty reads, 501 on changes.
pub struct NoMemory {
    config: MemoryConfig,
}

impl NoMemory {
    pub fn new(config: MemoryConfig) -> Self {
        NoMemory { config }
    }
}

fn unsupported() -> MemoryError {
    MemoryError::NotSupported("Long-term memory is not available in this build".into())
}

#[async_trait]
impl MemoryApi for NoMemory {
    async fn get(&self, _user_id: &str) -> Result<Value, MemoryError> {
        Ok(empty_memory())
    }
    async fn clear(&self, _user_id: &str) -> Result<Value, MemoryError> {
        Ok(empty_memory())
    }
    async fn create_fact(&self, _user_id: &str, _fact: NewFact) -> Result<Value, MemoryError> {
        Err(unsupported())
    }
    async fn update_fact(
        &self,
        _user_id: &str,
        _fact_id: &str,
        _patch: FactPatch,
    ) -> Result<Value, MemoryError> {
        Err(unsupported())
    }
    async fn delete_fact(&self, _user_id: &str, fact_id: &str) -> Result<Value, MemoryError> {
        Err(MemoryError::NotFound(fact_id.to_owned()))
    }
    async fn export(&self, _user_id: &str) -> Result<Value, MemoryError> {
        Ok(empty_memory())
    }
    async fn import(&self, _user_id: &str, _data: Value) -> Result<Value, MemoryError> {
        Err(unsupported())
    }
    async fn reload(&self, _user_id: &str) -> Result<Value, MemoryError> {
        Ok(empty_memory())
    }
    fn config(&self) -> Value {
        memory_config_json(&self.config)
    }
}

/// The long-term memory store (`antler_agent::memory::MemoryManager`) behind the routes.
pub struct ManagedMemory {
    manager: std::sync::Arc<antler_agent::memory::MemoryManager>,
    config: MemoryConfig,
}

impl ManagedMemory {
    pub fn new(
        manager: std::sync::Arc<antler_agent::memory::MemoryManager>,
        config: MemoryConfig,
    ) -> Self {
        ManagedMemory { manager, config }
    }

    /// The user's memory after a change, or the change's failure.
    async fn read_after<T>(
        &self,
        user_id: &str,
        changed: Result<T, antler_agent::memory::MemoryOpError>,
    ) -> Result<Value, MemoryError> {
        changed.map_err(op_error)?;
        self.read(user_id).await
    }

    async fn read(&self, user_id: &str) -> Result<Value, MemoryError> {
        let doc = self
            .manager
            .document(Some(user_id), None)
            .await
            .map_err(|e| MemoryError::Unavailable(e.to_string()))?;
        let mut v =
            serde_json::to_value(doc).map_err(|e| MemoryError::Unavailable(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.entry("revision").or_insert(json!(0));
            if o.get("lastUpdated").is_none_or(Value::is_null) {
                o.insert("lastUpdated".into(), json!(""));
            }
        }
        Ok(v)
    }
}

fn op_error(e: antler_agent::memory::MemoryOpError) -> MemoryError {
    use antler_agent::memory::MemoryOpError as E;
    match e {
        E::Duplicate => MemoryError::Conflict("Duplicate fact".into()),
        E::NotFound(id) => MemoryError::NotFound(id),
        E::Invalid(m) => MemoryError::Invalid(m),
        E::Conflict => MemoryError::Conflict(e.to_string()),
        other => MemoryError::Unavailable(other.to_string()),
    }
}

#[async_trait]
impl MemoryApi for ManagedMemory {
    async fn get(&self, user_id: &str) -> Result<Value, MemoryError> {
        self.read(user_id).await
    }
    async fn clear(&self, user_id: &str) -> Result<Value, MemoryError> {
        self.manager
            .clear(Some(user_id), None)
            .await
            .map_err(|e| MemoryError::Unavailable(e.to_string()))?;
        self.read(user_id).await
    }
    async fn create_fact(&self, user_id: &str, fact: NewFact) -> Result<Value, MemoryError> {
        let changed = self
            .manager
            .create_fact(
                Some(user_id),
                None,
                &fact.content,
                &fact.category,
                fact.confidence,
            )
            .await;
        self.read_after(user_id, changed).await
    }
    async fn update_fact(
        &self,
        user_id: &str,
        fact_id: &str,
        patch: FactPatch,
    ) -> Result<Value, MemoryError> {
        let changed = self
            .manager
            .update_fact(
                Some(user_id),
                None,
                fact_id,
                patch.content.as_deref(),
                patch.category.as_deref(),
                patch.confidence,
            )
            .await;
        self.read_after(user_id, changed).await
    }
    async fn delete_fact(&self, user_id: &str, fact_id: &str) -> Result<Value, MemoryError> {
        let changed = self.manager.delete_fact(Some(user_id), None, fact_id).await;
        self.read_after(user_id, changed).await
    }
    async fn export(&self, user_id: &str) -> Result<Value, MemoryError> {
        self.read(user_id).await
    }
    async fn import(&self, user_id: &str, data: Value) -> Result<Value, MemoryError> {
        let doc: antler_agent::memory::document::MemoryDocument = serde_json::from_value(data)
            .map_err(|e| MemoryError::Invalid(format!("not a memory document: {e}")))?;
        let changed = self.manager.import(Some(user_id), None, doc).await;
        self.read_after(user_id, changed).await
    }
    async fn reload(&self, user_id: &str) -> Result<Value, MemoryError> {
        self.read(user_id).await
    }
    fn config(&self) -> Value {
        memory_config_json(&self.config)
    }
}
