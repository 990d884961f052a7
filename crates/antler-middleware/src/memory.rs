//! Memory (chain L9, after_agent): hand the finished conversation to long-term memory.
//!
//! Once per run, after the agent loop, [`MemoryMiddleware`] queues the thread's messages — raw,
//! with the user id captured now, because the debounced background updater runs outside the
//! request — through a [`MemoryWriter`] (the memory backend's queue in `antler-agent`). It never
//! writes state and never fails the run: memory is a separate store with its own lifecycle
//! (seed 002), and a memory problem must not cost the user their answer.
//!
//! Choosing what is worth remembering is the backend's job (spec 40 §4.4); the DeerMem
//! preprocessing it applies lives in [`preprocess`] so the backend and the summarization flush
//! share one definition: keep user inputs and final AI replies, drop hidden framework messages
//! (except well-formed clarification answers), upload blocks and pure acknowledgements, and
//! detect correction/reinforcement/preference/identity/goal/decision signals.

use std::sync::Arc;

use antler_protocol::{Message, ThreadState};
use antler_runtime::{HookOutput, HookSet, Middleware, RunContext};
use async_trait::async_trait;
use serde_json::Value;

use crate::hook::AfterAgentResult;

const NAME: &str = "MemoryMiddleware";

/// A conversation handed to long-term memory after a run.
#[derive(Clone, Debug)]
pub struct MemoryCandidate {
    pub thread_id: String,
    /// The run that produced it (memory outcomes are journaled against it).
    pub run_id: String,
    /// Captured when the run ends; `None` = the unauthenticated default user.
    pub user_id: Option<String>,
    /// Custom agents get their own fact bucket; `None` = the lead agent.
    pub agent_name: Option<String>,
    pub trace_id: Option<String>,
    /// Every state message, raw, in order.
    pub messages: Arc<Vec<Arc<Message>>>,
}

/// Where [`MemoryMiddleware`] sends conversations: the memory backend's debounced queue.
/// Must return at once (enqueue, never extract inline) and must not fail the run: a full queue is
/// the backend's to log and drop.
pub trait MemoryWriter: Send + Sync {
    fn add(&self, candidate: MemoryCandidate);
}

/// Queues each finished run's conversation for memory extraction.
pub struct MemoryMiddleware {
    writer: Arc<dyn MemoryWriter>,
    enabled: bool,
    agent_name: Option<String>,
}

impl MemoryMiddleware {
    /// Enabled, for the lead agent (the run's `agent_name` option, if any, picks the bucket).
    pub fn new(writer: Arc<dyn MemoryWriter>) -> Self {
        MemoryMiddleware {
            writer,
            enabled: true,
            agent_name: None,
        }
    }

    /// `memory.enabled`: when false the middleware does nothing (it self-gates, so the chain
    /// keeps the same shape either way).
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The agent whose fact bucket this chain writes (custom agents).
    pub fn with_agent_name(mut self, agent_name: Option<String>) -> Self {
        self.agent_name = agent_name;
        self
    }
}

fn non_empty(v: Option<Value>) -> Option<String> {
    match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

#[async_trait]
impl Middleware for MemoryMiddleware {
    middleware_identity!(NAME, HookSet::AFTER_AGENT);

    async fn after_agent(&self, state: &ThreadState, run: &RunContext) -> AfterAgentResult {
        if !self.enabled {
            return Ok(HookOutput::none());
        }
        let thread_id = if run.thread_id.is_empty() {
            non_empty(run.options.extra.get("thread_id").cloned())
        } else {
            Some(run.thread_id.clone())
        };
        let Some(thread_id) = thread_id else {
            tracing::debug!("memory: no thread id, nothing queued");
            return Ok(HookOutput::none());
        };
        if state.messages.is_empty() {
            return Ok(HookOutput::none());
        }
        let trace_id = non_empty(run.options.extra.get("trace_id").cloned());
        self.writer.add(MemoryCandidate {
            thread_id,
            run_id: run.run_id.clone(),
            user_id: run.user_id.clone(),
            agent_name: self
                .agent_name
                .clone()
                .or_else(|| run.options.agent_name.clone()),
            trace_id,
            messages: state.messages.shared(),
        });
        Ok(HookOutput::none())
    }
}

/// DeerMem's conversation preprocessing (spec 40 §4.4): what of a conversation is worth handing
/// to the memory model, and which signals it carries.
pub mod preprocess {
    use std::collections::BTreeSet;
    use std::sync::{Arc, LazyLock};

    use antler_protocol::{Content, Message, Object};
    use regex::Regex;
    use serde_json::Value;

    /// A class of user statement worth remembering (names match fact categories, except
    /// `reinforcement`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Signal {
        Correction,
        Reinforcement,
        Preference,
        Identity,
        Goal,
        Decision,
    }

    impl Signal {
        pub const ALL: [Signal; 6] = [
            Signal::Correction,
            Signal::Reinforcement,
            Signal::Preference,
            Signal::Identity,
            Signal::Goal,
            Signal::Decision,
        ];

        pub fn as_str(self) -> &'static str {
            match self {
                Signal::Correction => "correction",
                Signal::Reinforcement => "reinforcement",
                Signal::Preference => "preference",
                Signal::Identity => "identity",
                Signal::Goal => "goal",
                Signal::Decision => "decision",
            }
        }

        fn patterns(self) -> &'static [Regex] {
            match self {
                Signal::Correction => &CORRECTION,
                Signal::Reinforcement => &REINFORCEMENT,
                Signal::Preference => &PREFERENCE,
                Signal::Identity => &IDENTITY,
                Signal::Goal => &GOAL,
                Signal::Decision => &DECISION,
            }
        }
    }

    /// Compile built-in patterns; `(?i)` marks the case-insensitive ones. A pattern that does
    /// not compile is a bug caught by the tests, and is skipped rather than panicking.
    fn compile(patterns: &[&str]) -> Vec<Regex> {
        patterns
            .iter()
            .filter_map(|p| match Regex::new(p) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::error!(pattern = p, error = %e, "invalid memory signal pattern");
                    None
                }
            })
            .collect()
    }

    /// Bundled signal patterns (DeerMem's defaults, English and Chinese). Bare 对/没错 are
    /// deliberately absent from reinforcement: they occur in 对不起, 对方, ….
    static CORRECTION: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            r"(?i)\bthat(?:'s| is) (?:wrong|incorrect)\b",
            r"(?i)\byou misunderstood\b",
            r"(?i)\btry again\b",
            r"(?i)\bredo\b",
            "不对",
            "你理解错了",
            "你理解有误",
            "重试",
            "重新来",
            "换一种",
            "改用",
        ])
    });
    static REINFORCEMENT: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            r"(?i)\byes[,.]?\s+(?:exactly|perfect|that(?:'s| is) (?:right|correct|it))\b",
            r"(?i)\bperfect(?:[.!?]|$)",
            r"(?i)\bexactly\s+(?:right|correct)\b",
            r"(?i)\bthat(?:'s| is)\s+(?:exactly\s+)?(?:right|correct|what i (?:wanted|needed|meant))\b",
            r"(?i)\bkeep\s+(?:doing\s+)?that\b",
            r"(?i)\bjust\s+(?:like\s+)?(?:that|this)\b",
            r"(?i)\bthis is (?:great|helpful)\b(?:[.!?]|$)",
            r"(?i)\bthis is what i wanted\b(?:[.!?]|$)",
            r"对[，,]?\s*就是这样(?:[。！？!?.]|$)",
            r"完全正确(?:[。！？!?.]|$)",
            r"(?:对[，,]?\s*)?就是这个意思(?:[。！？!?.]|$)",
            r"正是我想要的(?:[。！？!?.]|$)",
            r"继续保持(?:[。！？!?.]|$)",
            r"(?:以后|今后)(?:都|一直)?保持这样(?:[。！？!?.]|$)",
        ])
    });
    static PREFERENCE: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            r"(?i)\bI (?:really )?(?:prefer|like|love|enjoy|favor)\b",
            r"(?i)\bI (?:really )?(?:hate|dislike|don.t like|cannot stand)\b",
            r"(?i)\bmy favorite\b",
            r"(?i)\bI.d rather\b",
            "我喜欢",
            "我偏好",
            "我更喜欢",
            "我偏爱",
            "我讨厌",
            "我不喜欢",
            "我钟爱",
            "我最喜欢",
        ])
    });
    static IDENTITY: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            r"(?i)\bI am (?:a |an )?[a-z][a-z -]{2,}\b",
            r"(?i)\bI work as\b",
            r"(?i)\bI.m (?:a |an )?[a-z][a-z -]{2,}\b",
            r"(?i)\bmy job is\b",
            "我是",
            "我的职业是",
            "我的工作是",
            "我担任",
            "我是一名",
        ])
    });
    static GOAL: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            r"(?i)\bI (?:plan to|want to|am going to|aim to|intend to)\b",
            r"(?i)\bmy goal is\b",
            r"(?i)\bI.m going to\b",
            r"(?i)\bnext I.ll\b",
            "我的目标是",
            "我打算",
            "我准备",
            "接下来我要",
            "接下来我打算",
            "我想做",
        ])
    });
    static DECISION: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            r"(?i)\blet.s (?:go with|use|pick|choose)\b",
            r"(?i)\bI.ll (?:go with|use|pick|choose)\b",
            r"(?i)\bwe (?:should|will) (?:go with|use|pick|choose)\b",
            r"(?i)\bI (?:decide|chose|selected) to\b",
            "就用",
            "决定用",
            "决定采用",
            "我们选",
            "我选",
            "就采用",
        ])
    });
    /// Whole-message acknowledgements (matched against the entire stripped text).
    static TRIVIAL: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compile(&[
            "^(?:嗯+)$",
            "(?i)^(?:ok(?:ay)?)$",
            "^(?:好的[呢]?)$",
            "^(?:好[的呀]?)$",
            "^(?:谢谢)$",
            "^(?:感谢)$",
            "^(?:多谢)$",
            "^(?:对)$",
            "^(?:是的)$",
            "^(?:收到)$",
            "^(?:明白)$",
            "^(?:了解)$",
            "^(?:知道了)$",
            "(?i)^(?:got it)$",
            "(?i)^(?:thanks)$",
            "(?i)^(?:thank you)$",
            "(?i)^(?:cheers)$",
        ])
    });
    static UPLOAD_BLOCK: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(
            r"(?is)<uploaded_files>.*?</uploaded_files>\n*|<current_uploads>.*?</current_uploads>\n*",
        )
        .ok()
    });

    /// A sentence describing a file-upload event (not general file work: "works with CSV files"
    /// and "prefers PDF export" do not match).
    static UPLOAD_SENTENCE: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(
            r"(?i)(?:[^.!?\s][^.!?]*)?(?:\bupload(?:ed|ing)?(?:\s+\w+){0,3}\s+(?:files?|documents?|attachments?)\b|\bfile\s+upload|/mnt/user-data/uploads/|<(?:uploaded_files|current_uploads)>)[^.!?]*[.!?]?\s*",
        )
        .ok()
    });
    static MULTI_SPACE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new("  +").ok());

    /// Remove sentences about uploading files from a memory summary (uploads are per-thread and
    /// gone in the next conversation).
    pub fn strip_upload_sentences(text: &str) -> String {
        let Some(re) = &*UPLOAD_SENTENCE else {
            return text.to_owned();
        };
        let cut = re.replace_all(text, "");
        let cut = cut.trim();
        match &*MULTI_SPACE {
            Some(sp) => sp.replace_all(cut, " ").into_owned(),
            None => cut.to_owned(),
        }
    }

    /// Whether a fact describes an upload event (such facts are dropped).
    pub fn mentions_upload(text: &str) -> bool {
        UPLOAD_SENTENCE.as_ref().is_some_and(|re| re.is_match(text))
    }

    /// Trailing characters ignored when deciding whether a turn is a bare acknowledgement.
    const TRIVIAL_TRAIL: &[char] = &[
        ' ', '\t', '\n', '\r', '.', '。', ',', '，', '!', '！', '?', '？', ';', '；',
    ];

    /// Text of a message for filtering: a string as is; for blocks, every text part joined with
    /// a space (images and other blocks ignored).
    pub fn message_text(m: &Message) -> String {
        match m.content() {
            Content::Text(s) => s.clone(),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter_map(|b| match b {
                    Value::String(s) => Some(s.as_str()),
                    Value::Object(o) => o.get("text").and_then(Value::as_str),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// Remove `<uploaded_files>` / `<current_uploads>` blocks (ephemeral per-thread paths).
    pub fn strip_upload_blocks(text: &str) -> String {
        match &*UPLOAD_BLOCK {
            Some(re) => re.replace_all(text, "").into_owned(),
            None => text.to_owned(),
        }
    }

    fn non_empty_str(v: Option<&Value>) -> bool {
        v.and_then(Value::as_str)
            .is_some_and(|s| !s.trim().is_empty())
    }

    /// Whether hidden-message kwargs carry a well-formed clarification answer (the one kind of
    /// hidden human message that is the user's own words).
    pub fn is_human_input_response(kwargs: &Object) -> bool {
        let Some(Value::Object(r)) = kwargs.get("human_input_response") else {
            return false;
        };
        if r.get("version").and_then(Value::as_i64) != Some(1)
            || r.get("kind").and_then(Value::as_str) != Some("human_input_response")
        {
            return false;
        }
        if !["source", "request_id", "value"]
            .iter()
            .all(|k| non_empty_str(r.get(*k)))
        {
            return false;
        }
        match r.get("response_kind").and_then(Value::as_str) {
            Some("text") => true,
            Some("option") => non_empty_str(r.get("option_id")),
            _ => false,
        }
    }

    /// Keep user inputs and final AI replies (spec 40 §4.4 step 1). Hidden human messages are
    /// dropped unless they are clarification answers; upload blocks are stripped, and a turn
    /// that was only uploads is dropped together with the reply that follows it. Unchanged
    /// messages are shared, not copied.
    pub fn filter_messages_for_memory(messages: &[Arc<Message>]) -> Vec<Arc<Message>> {
        let mut out = Vec::new();
        let mut skip_next_ai = false;
        for m in messages {
            match &**m {
                Message::Human(h) => {
                    if m.is_hidden() && !is_human_input_response(&h.additional_kwargs) {
                        continue;
                    }
                    let text = message_text(m);
                    let lower = text.to_lowercase();
                    if lower.contains("<uploaded_files>") || lower.contains("<current_uploads>") {
                        let stripped = strip_upload_blocks(&text).trim().to_owned();
                        if stripped.is_empty() {
                            skip_next_ai = true;
                            continue;
                        }
                        let mut clean = (**m).clone();
                        *clean.content_mut() = Content::Text(stripped);
                        out.push(Arc::new(clean));
                    } else {
                        out.push(m.clone());
                    }
                    skip_next_ai = false;
                }
                Message::Ai(ai) if ai.tool_calls.is_empty() => {
                    if skip_next_ai {
                        skip_next_ai = false;
                        continue;
                    }
                    out.push(m.clone());
                }
                Message::Ai(_) | Message::Tool(_) | Message::System(_) | Message::Remove(_) => {}
            }
        }
        out
    }

    /// Whether a human turn is nothing but an acknowledgement ("ok", "谢谢！").
    pub fn is_trivial(text: &str) -> bool {
        let t = text.trim().trim_end_matches(TRIVIAL_TRAIL);
        !t.is_empty() && TRIVIAL.iter().any(|re| re.is_match(t))
    }

    /// Drop acknowledgement turns together with the AI reply that follows each (step 2).
    pub fn filter_trivial(messages: Vec<Arc<Message>>) -> Vec<Arc<Message>> {
        let mut out = Vec::with_capacity(messages.len());
        let mut skip_next_ai = false;
        for m in messages {
            match &*m {
                Message::Human(_) => {
                    if is_trivial(&message_text(&m)) {
                        skip_next_ai = true;
                        continue;
                    }
                    skip_next_ai = false;
                    out.push(m);
                }
                Message::Ai(ai) if ai.tool_calls.is_empty() => {
                    if skip_next_ai {
                        skip_next_ai = false;
                        continue;
                    }
                    out.push(m);
                }
                _ => {}
            }
        }
        out
    }

    /// Signals in the human turns among the last six messages (step 4).
    pub fn detect_signals(messages: &[Arc<Message>]) -> BTreeSet<Signal> {
        let start = messages.len().saturating_sub(6);
        let texts: Vec<String> = messages[start..]
            .iter()
            .filter(|m| matches!(&***m, Message::Human(_)))
            .map(|m| message_text(m).trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        Signal::ALL
            .into_iter()
            .filter(|s| {
                texts
                    .iter()
                    .any(|t| s.patterns().iter().any(|re| re.is_match(t)))
            })
            .collect()
    }

    /// The full preprocessing: filter, drop trivial turns; `None` when what is left has no
    /// human or no AI message (nothing to enqueue).
    pub fn prepare(messages: &[Arc<Message>]) -> Option<Vec<Arc<Message>>> {
        let kept = filter_trivial(filter_messages_for_memory(messages));
        let has = |kind: &str| kept.iter().any(|m| m.kind() == kind);
        (has("human") && has("ai")).then_some(kept)
    }
}
