//! The memory document: six summary sections and a list of facts, in DeerMem's JSON shape
//! (`user.{workContext,personalContext,topOfMind}`, `history.{recentMonths,earlierContext,
//! longTermBackground}`, `facts[]` with `id, content, category, confidence, createdAt, source`).
//! This is what `antler memory show --output json` prints and what the memory model is shown.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Accept any JSON for a summary and keep strings only (an import may plant a number).
fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// One summary section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    #[serde(default, deserialize_with = "lenient_string")]
    pub summary: String,
    #[serde(rename = "updatedAt", default, deserialize_with = "lenient_string")]
    pub updated_at: String,
}

/// `user.*`: the current picture of the user.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UserSections {
    #[serde(rename = "workContext")]
    pub work_context: Section,
    #[serde(rename = "personalContext")]
    pub personal_context: Section,
    #[serde(rename = "topOfMind")]
    pub top_of_mind: Section,
}

/// `history.*`: what the user did over time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistorySections {
    #[serde(rename = "recentMonths")]
    pub recent_months: Section,
    #[serde(rename = "earlierContext")]
    pub earlier_context: Section,
    #[serde(rename = "longTermBackground")]
    pub long_term_background: Section,
}

/// The per-user summaries (shared by every agent bucket).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Profile {
    pub user: UserSections,
    pub history: HistorySections,
}

impl Profile {
    /// `(section key, section)` of the user part, in injection order.
    pub fn user_sections_mut(&mut self) -> [(&'static str, &mut Section); 3] {
        [
            ("workContext", &mut self.user.work_context),
            ("personalContext", &mut self.user.personal_context),
            ("topOfMind", &mut self.user.top_of_mind),
        ]
    }

    /// `(section key, section)` of the history part, in injection order.
    pub fn history_sections_mut(&mut self) -> [(&'static str, &mut Section); 3] {
        [
            ("recentMonths", &mut self.history.recent_months),
            ("earlierContext", &mut self.history.earlier_context),
            ("longTermBackground", &mut self.history.long_term_background),
        ]
    }

    pub fn is_empty(&self) -> bool {
        let u = &self.user;
        let h = &self.history;
        [
            &u.work_context,
            &u.personal_context,
            &u.top_of_mind,
            &h.recent_months,
            &h.earlier_context,
            &h.long_term_background,
        ]
        .iter()
        .all(|s| s.summary.trim().is_empty())
    }
}

/// One remembered fact. Unknown keys are kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub id: String,
    #[serde(default)]
    pub content: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default)]
    pub confidence: Value,
    #[serde(rename = "createdAt", default)]
    pub created_at: String,
    /// The thread the fact came from (`manual`, `import`, … for other origins).
    #[serde(default)]
    pub source: Value,
    #[serde(
        rename = "sourceError",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub source_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_valid_days: Option<i64>,
    #[serde(
        rename = "lastConfirmedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_confirmed_at: Option<String>,
    #[serde(
        rename = "confirmationCount",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub confirmation_count: Option<i64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Fact {
    /// The content when it is a non-blank string.
    pub fn text(&self) -> Option<&str> {
        self.content
            .as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// Confidence clamped to [0, 1]; missing, non-numeric, NaN or infinite count as 0.
    pub fn confidence(&self) -> f64 {
        let c = match &self.confidence {
            Value::Number(n) => n.as_f64().unwrap_or(0.0),
            Value::String(s) => s.trim().parse().unwrap_or(0.0),
            _ => 0.0,
        };
        if c.is_finite() {
            c.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// Whether a user wrote it by hand (shown to the memory model as `[MANUAL]`).
    pub fn is_manual(&self) -> bool {
        match &self.source {
            Value::String(s) => s == "manual",
            Value::Object(o) => o.get("type").and_then(Value::as_str) == Some("manual"),
            _ => false,
        }
    }
}

/// Dedupe key of fact content: trimmed and case-folded.
pub fn content_key(content: &str) -> Option<String> {
    let t = content.trim();
    (!t.is_empty()).then(|| t.to_lowercase())
}

/// A user's memory as one document (the API and `antler memory show` shape).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryDocument {
    pub version: String,
    #[serde(rename = "lastUpdated")]
    pub last_updated: Option<String>,
    pub user: UserSections,
    pub history: HistorySections,
    pub facts: Vec<Fact>,
}

impl MemoryDocument {
    pub fn new(profile: Profile, facts: Vec<Fact>, last_updated: Option<String>) -> Self {
        MemoryDocument {
            version: "1.0".to_owned(),
            last_updated,
            user: profile.user,
            history: profile.history,
            facts,
        }
    }
}
