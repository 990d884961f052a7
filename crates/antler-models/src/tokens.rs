//! Token counting for context management (summarization triggers, keep-by-tokens, budgets).
//!
//! [`TokenCounter`] counts text and messages for one model family: with the BPE encoding
//! tiktoken uses for the model (`o200k_base` for GPT-4o/4.1/5 and the o-series, `cl100k_base` —
//! the encoding DeerFlow's own tiktoken counting uses — for everything else), or with LangChain's
//! `count_tokens_approximately` (chars / 3.3 for Anthropic models, which have no public
//! tokenizer), or with the CJK-aware char estimate DeerFlow falls back to when tiktoken is
//! unavailable. The encodings are embedded in the binary (no download) and built once per process,
//! on first use.
//!
//! [`CachedTokenCounter`] is what the loop uses: it remembers the count of every message by id
//! and content fingerprint, and keeps a running tally per thread, so measuring a long history
//! costs O(new or changed messages) per step — a pointer comparison for every message already
//! seen, tokenization only for the new ones.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use antler_protocol::identity::{address, shared_prefix_addrs};
use antler_protocol::{Content, Message};
use serde_json::Value;
use tiktoken_rs::CoreBPE;

/// A BPE encoding shipped with tiktoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-5, o1/o3/o4.
    O200kBase,
    /// GPT-4, GPT-3.5; DeerFlow's default encoding, used for unknown models.
    Cl100kBase,
    P50kBase,
    R50kBase,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::P50kBase => "p50k_base",
            Encoding::R50kBase => "r50k_base",
        }
    }

    /// Whether this process has built the encoding's tables yet (diagnostics and tests: the
    /// first build is most of a cold start).
    pub fn is_built(self) -> bool {
        self.cell().get().is_some()
    }

    fn cell(self) -> &'static OnceLock<Option<CoreBPE>> {
        static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();
        static CL100K: OnceLock<Option<CoreBPE>> = OnceLock::new();
        static P50K: OnceLock<Option<CoreBPE>> = OnceLock::new();
        static R50K: OnceLock<Option<CoreBPE>> = OnceLock::new();
        match self {
            Encoding::O200kBase => &O200K,
            Encoding::Cl100kBase => &CL100K,
            Encoding::P50kBase => &P50K,
            Encoding::R50kBase => &R50K,
        }
    }

    /// The process-wide BPE tables, built on first use. `None` if they could not be built (the
    /// tables are embedded, so this means a broken build); callers fall back to an estimate.
    fn bpe(self) -> Option<&'static CoreBPE> {
        self.cell().get_or_init(|| {
            let built = match self {
                Encoding::O200kBase => tiktoken_rs::o200k_base(),
                Encoding::Cl100kBase => tiktoken_rs::cl100k_base(),
                Encoding::P50kBase => tiktoken_rs::p50k_base(),
                Encoding::R50kBase => tiktoken_rs::r50k_base(),
            };
            match built {
                Ok(bpe) => Some(bpe),
                Err(e) => {
                    tracing::warn!(encoding = self.name(), error = %e, "could not build the tiktoken encoding; falling back to a char-based estimate");
                    None
                }
            }
        })
        .as_ref()
    }
}

/// A user-supplied text counter (tests, exotic tokenizers).
pub type CountFn = Arc<dyn Fn(&str) -> usize + Send + Sync>;

#[derive(Clone)]
enum Kind {
    Bpe(Encoding),
    /// LangChain's `count_tokens_approximately`.
    Approximate {
        chars_per_token: f64,
    },
    /// DeerFlow's network-free estimate: ~4 chars per token, ~2 per CJK character.
    CharEstimate,
    Custom(CountFn),
}

/// Counts tokens of text and messages for one model family.
#[derive(Clone)]
pub struct TokenCounter {
    kind: Kind,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Bpe(e) => write!(f, "TokenCounter({})", e.name()),
            Kind::Approximate { chars_per_token } => {
                write!(
                    f,
                    "TokenCounter(approximate, {chars_per_token} chars/token)"
                )
            }
            Kind::CharEstimate => f.write_str("TokenCounter(char estimate)"),
            Kind::Custom(_) => f.write_str("TokenCounter(custom)"),
        }
    }
}

impl Default for TokenCounter {
    /// `cl100k_base`.
    fn default() -> Self {
        TokenCounter::with_encoding(Encoding::Cl100kBase)
    }
}

/// Framing tokens per chat message (OpenAI's accounting; also LangChain's approximate counter).
const PER_MESSAGE: usize = 3;
/// A name field costs one extra token besides its text (OpenAI's accounting).
const PER_NAME: usize = 1;
/// Flat cost of one image block (a low-detail image; LangChain's approximate counter uses it too).
const PER_IMAGE: usize = 85;
/// Runs of whitespace or of non-whitespace longer than this (bytes) are estimated, not
/// tokenized: BPE merging is quadratic in the length of one piece, and a long run (a separator
/// line, a blob, padding) would stall the loop.
const MAX_BPE_RUN: usize = 256;
/// Texts longer than this (bytes) are tokenized up to here and extrapolated by length, so one
/// huge tool output costs a bounded few milliseconds, once.
const MAX_BPE_TEXT: usize = 64 * 1024;

/// The encoding a model id uses, `None` for models without a public tokenizer (Anthropic).
fn encoding_for(model: &str) -> Option<Encoding> {
    let lower = model.trim().to_ascii_lowercase();
    // Router-style ids (`openai/gpt-4o`, `anthropic/claude-…`) name the model after the slash.
    let id = lower.rsplit('/').next().unwrap_or(&lower);
    if id.starts_with("claude") || lower.starts_with("anthropic") {
        return None;
    }
    use tiktoken_rs::tokenizer::Tokenizer;
    if let Some(t) = tiktoken_rs::tokenizer::get_tokenizer(id) {
        return Some(match t {
            // Harmony adds special tokens only; ordinary text encodes as o200k_base.
            Tokenizer::O200kBase | Tokenizer::O200kHarmony => Encoding::O200kBase,
            Tokenizer::Cl100kBase => Encoding::Cl100kBase,
            Tokenizer::P50kBase | Tokenizer::P50kEdit => Encoding::P50kBase,
            Tokenizer::R50kBase | Tokenizer::Gpt2 => Encoding::R50kBase,
        });
    }
    // Newer OpenAI families than tiktoken-rs knows.
    const O200K: [&str; 8] = [
        "gpt-5", "gpt-4.5", "gpt-4.1", "gpt-4o", "chatgpt-", "o1", "o3", "o4",
    ];
    if O200K.iter().any(|p| id.starts_with(p)) {
        return Some(Encoding::O200kBase);
    }
    Some(Encoding::Cl100kBase)
}

fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3040}'..='\u{30ff}' | '\u{ac00}'..='\u{d7a3}')
}

fn char_estimate(text: &str) -> usize {
    let (mut all, mut cjk) = (0usize, 0usize);
    for c in text.chars() {
        all += 1;
        if is_cjk(c) {
            cjk += 1;
        }
    }
    (all - cjk) / 4 + cjk / 2
}

/// BPE count of `text`, estimating over-long runs and texts (see [`MAX_BPE_RUN`],
/// [`MAX_BPE_TEXT`]).
fn bpe_count(bpe: &CoreBPE, text: &str) -> usize {
    if text.len() > MAX_BPE_TEXT {
        let mut cut = MAX_BPE_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let head = bpe_count(bpe, &text[..cut]);
        return (head as f64 * text.len() as f64 / cut as f64).ceil() as usize;
    }
    if text.len() <= MAX_BPE_RUN {
        return bpe.encode_ordinary(text).len();
    }
    let mut total = 0;
    // Start of the not-yet-counted span.
    let mut span = 0;
    let mut flush_run = |start: usize, end: usize| {
        if end - start > MAX_BPE_RUN {
            if start > span {
                total += bpe.encode_ordinary(&text[span..start]).len();
            }
            // Dense text (blobs, separators, padding) runs about 3 chars per token or more;
            // over-counting is the safe side for a trigger.
            total += text[start..end].chars().count().div_ceil(3);
            span = end;
        }
    };
    // Runs of whitespace and of non-whitespace alternate; each is one BPE piece or more.
    let mut run_start = 0;
    let mut run_ws: Option<bool> = None;
    for (i, c) in text.char_indices() {
        let ws = c.is_whitespace();
        if run_ws != Some(ws) {
            if run_ws.is_some() {
                flush_run(run_start, i);
            }
            run_start = i;
            run_ws = Some(ws);
        }
    }
    flush_run(run_start, text.len());
    if span < text.len() {
        total += bpe.encode_ordinary(&text[span..]).len();
    }
    total
}

/// The OpenAI role name of a message (what the provider sees).
fn role(m: &Message) -> &'static str {
    match m {
        Message::Human(_) => "user",
        Message::Ai(_) => "assistant",
        Message::System(_) => "system",
        Message::Tool(_) => "tool",
        Message::Remove(_) => "remove",
    }
}

fn is_image_block(block: &serde_json::Map<String, Value>) -> bool {
    matches!(
        block.get("type").and_then(Value::as_str),
        Some("image_url" | "image" | "input_image")
    )
}

/// The countable parts of a message: text pieces and a number of image blocks.
struct Pieces<'a> {
    texts: Vec<std::borrow::Cow<'a, str>>,
    images: usize,
}

fn pieces(m: &Message) -> Pieces<'_> {
    use std::borrow::Cow;
    let mut texts: Vec<Cow<'_, str>> = Vec::with_capacity(2);
    let mut images = 0;
    match m.content() {
        Content::Text(s) => texts.push(Cow::Borrowed(s.as_str())),
        Content::Blocks(blocks) => {
            for b in blocks {
                match b {
                    Value::String(s) => texts.push(Cow::Borrowed(s.as_str())),
                    Value::Object(o) if is_image_block(o) => images += 1,
                    Value::Object(o) => match o.get("text") {
                        Some(Value::String(s)) => texts.push(Cow::Borrowed(s.as_str())),
                        _ => texts.push(Cow::Owned(b.to_string())),
                    },
                    other => texts.push(Cow::Owned(other.to_string())),
                }
            }
        }
    }
    match m {
        Message::Ai(ai) => {
            for c in &ai.tool_calls {
                texts.push(Cow::Borrowed(c.name.as_str()));
                // Serialized from the borrow (the same compact JSON as the map's `Value` form).
                texts.push(Cow::Owned(
                    serde_json::to_string(&c.args).unwrap_or_default(),
                ));
            }
            for c in &ai.invalid_tool_calls {
                if let Some(a) = &c.args {
                    texts.push(Cow::Borrowed(a.as_str()));
                }
            }
        }
        Message::Tool(t) => texts.push(Cow::Borrowed(t.tool_call_id.as_str())),
        Message::Human(_) | Message::System(_) | Message::Remove(_) => {}
    }
    Pieces { texts, images }
}

impl TokenCounter {
    /// The counter for a provider model id (picks the tiktoken encoding; Anthropic models use the
    /// approximate counter at 3.3 chars per token, as DeerFlow's counter does).
    pub fn for_model(model: &str) -> TokenCounter {
        match encoding_for(model) {
            Some(e) => TokenCounter::with_encoding(e),
            None => TokenCounter::approximate_with(3.3),
        }
    }

    /// Count with one tiktoken encoding.
    pub fn with_encoding(encoding: Encoding) -> TokenCounter {
        TokenCounter {
            kind: Kind::Bpe(encoding),
        }
    }

    /// LangChain's `count_tokens_approximately` (4 chars per token, 3 per message).
    pub fn approximate() -> TokenCounter {
        TokenCounter::approximate_with(4.0)
    }

    /// LangChain's `count_tokens_approximately` with another chars-per-token ratio.
    pub fn approximate_with(chars_per_token: f64) -> TokenCounter {
        TokenCounter {
            kind: Kind::Approximate {
                chars_per_token: if chars_per_token > 0.0 {
                    chars_per_token
                } else {
                    4.0
                },
            },
        }
    }

    /// DeerFlow's network-free estimate (`len/4`, CJK characters at 2 per token) — what its
    /// tiktoken counting falls back to.
    pub fn char_estimate() -> TokenCounter {
        TokenCounter {
            kind: Kind::CharEstimate,
        }
    }

    /// A user-supplied text counter. Messages then cost the sum of their pieces, no framing.
    pub fn custom(f: impl Fn(&str) -> usize + Send + Sync + 'static) -> TokenCounter {
        TokenCounter {
            kind: Kind::Custom(Arc::new(f)),
        }
    }

    /// The tiktoken encoding, when this counter uses one.
    pub fn encoding(&self) -> Option<Encoding> {
        match self.kind {
            Kind::Bpe(e) => Some(e),
            _ => None,
        }
    }

    /// Tokens in a text.
    pub fn count_text(&self, text: &str) -> usize {
        match &self.kind {
            Kind::Bpe(e) => match e.bpe() {
                Some(bpe) => bpe_count(bpe, text),
                None => char_estimate(text),
            },
            Kind::Approximate { chars_per_token } => {
                (text.chars().count() as f64 / chars_per_token).ceil() as usize
            }
            Kind::CharEstimate => char_estimate(text),
            Kind::Custom(f) => f(text),
        }
    }

    /// Tokens of one message as sent to a model: its text, tool calls and tool-call id, image
    /// blocks at a flat 85, plus the per-message framing of the counting scheme.
    pub fn count_message(&self, m: &Message) -> usize {
        let p = pieces(m);
        let images = p.images * PER_IMAGE;
        match &self.kind {
            Kind::Approximate { chars_per_token } => {
                // LangChain: role and name are counted as characters, one ceil per message.
                let mut chars: usize = p.texts.iter().map(|t| t.chars().count()).sum();
                chars += role(m).len();
                chars += m.name().as_deref().map_or(0, |n| n.chars().count());
                (chars as f64 / chars_per_token).ceil() as usize + PER_MESSAGE + images
            }
            Kind::Custom(f) => p.texts.iter().map(|t| f(t)).sum::<usize>() + images,
            Kind::Bpe(_) | Kind::CharEstimate => {
                let text: usize = p.texts.iter().map(|t| self.count_text(t)).sum();
                let name = m
                    .name()
                    .as_deref()
                    .map_or(0, |n| self.count_text(n) + PER_NAME);
                // The role is one token in every tiktoken encoding.
                PER_MESSAGE + 1 + text + name + images
            }
        }
    }

    /// An upper bound of [`TokenCounter::count_message`] that never builds a BPE table: a BPE
    /// token covers at least one byte, so a text costs at most its UTF-8 length (the estimates
    /// for long runs and long texts stay below it too). For the other counters, which are cheap,
    /// it is the count itself.
    pub fn upper_bound_message(&self, m: &Message) -> usize {
        if !matches!(self.kind, Kind::Bpe(_)) {
            return self.count_message(m);
        }
        let p = pieces(m);
        let text: usize = p.texts.iter().map(|t| t.len()).sum();
        let name = m.name().as_deref().map_or(0, |n| n.len() + PER_NAME);
        PER_MESSAGE + 1 + text + name + p.images * PER_IMAGE
    }

    /// Whether counting needs a BPE table (built once per process, the costly part of a cold
    /// start): only then is [`TokenCounter::upper_bound_message`] cheaper than the count.
    fn is_bpe(&self) -> bool {
        matches!(self.kind, Kind::Bpe(_))
    }

    /// Tokens of several messages.
    pub fn count_messages<'a>(&self, msgs: impl IntoIterator<Item = &'a Message>) -> usize {
        msgs.into_iter().map(|m| self.count_message(m)).sum()
    }
}

/// Hash of everything [`TokenCounter::count_message`] looks at: a message whose id is known but
/// whose fingerprint changed (an in-place replacement) is counted again.
pub fn message_fingerprint(m: &Message) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.kind().hash(&mut h);
    match m.content() {
        Content::Text(s) => {
            0u8.hash(&mut h);
            s.hash(&mut h);
        }
        Content::Blocks(b) => {
            1u8.hash(&mut h);
            for v in b {
                hash_value(v, &mut h);
            }
        }
    }
    m.name().hash(&mut h);
    match m {
        Message::Ai(ai) => {
            for c in &ai.tool_calls {
                c.name.hash(&mut h);
                c.id.hash(&mut h);
                for (k, v) in &c.args {
                    k.hash(&mut h);
                    hash_value(v, &mut h);
                }
            }
            for c in &ai.invalid_tool_calls {
                c.args.hash(&mut h);
            }
        }
        Message::Tool(t) => t.tool_call_id.hash(&mut h),
        Message::Human(_) | Message::System(_) | Message::Remove(_) => {}
    }
    h.finish()
}

fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            for x in a {
                hash_value(x, h);
            }
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            for (k, x) in o {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

/// Token totals of a message list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measure {
    /// Sum of the per-message counts.
    pub total: usize,
    /// `total` calibrated against the provider's own numbers (DeerFlow's usage-metadata scaling):
    /// when every AI message comes from the same `response_metadata.model_provider` and the
    /// latest AI message carrying `usage_metadata.total_tokens` exists, `total` times
    /// `clamp(total_tokens / estimate up to and including that message, 1.0, 1.25)`.
    pub scaled: usize,
}

/// What the tally remembers of one AI message.
#[derive(Clone, Debug)]
struct AiMark {
    provider: Option<String>,
    usage_total: Option<u64>,
}

struct Slot {
    /// The message counted here. A `Weak` keeps the allocation (not the message) alive, so its
    /// address in `Tally::addrs` cannot be reused by another message while we compare against it.
    ptr: Weak<Message>,
    /// The exact count; `None` until someone needs it (see [`CachedTokenCounter::bound`]).
    tokens: Option<usize>,
    /// [`TokenCounter::upper_bound_message`].
    bound: usize,
    ai: Option<AiMark>,
}

/// A thread's running count: one slot per message of the list as last seen.
#[derive(Default)]
struct Tally {
    slots: Vec<Slot>,
    /// Each slot's message address (0 once released), apart so a sync compares them in rounds
    /// ([`antler_protocol::identity`]); valid while the slot's `Weak` holds the allocation.
    addrs: Vec<usize>,
    /// id → (fingerprint, tokens): lets a rebuilt list (remove-all, reload from the store) reuse
    /// counts without tokenizing again.
    by_id: HashMap<String, (u64, usize)>,
    /// Sum of the known exact counts.
    total: usize,
    /// Sum of the bounds of every slot.
    bound_total: usize,
    /// Slots whose exact count is not known yet.
    uncounted: usize,
    /// AI messages per `model_provider` (`None` = not stated).
    providers: HashMap<Option<String>, usize>,
    /// AI messages carrying a usage total.
    with_usage: usize,
    last_used: u64,
    /// Taken out of the counter's map: its slots no longer count towards the total.
    detached: bool,
}

fn ai_mark(m: &Message) -> Option<AiMark> {
    let ai = m.as_ai()?;
    Some(AiMark {
        provider: ai
            .response_metadata
            .get("model_provider")
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage_total: ai.usage_metadata.as_ref().map(|u| u.total_tokens),
    })
}

impl Tally {
    fn account(&mut self, slot: &Slot, sign: bool) {
        let tokens = slot.tokens.unwrap_or(0);
        let uncounted = usize::from(slot.tokens.is_none());
        if sign {
            self.total += tokens;
            self.bound_total += slot.bound;
            self.uncounted += uncounted;
        } else {
            self.total -= tokens;
            self.bound_total -= slot.bound;
            self.uncounted -= uncounted;
        }
        if let Some(ai) = &slot.ai {
            let n = self.providers.entry(ai.provider.clone()).or_insert(0);
            if sign {
                *n += 1;
            } else {
                *n -= 1;
                if *n == 0 {
                    self.providers.remove(&ai.provider);
                }
            }
            if ai.usage_total.is_some() {
                if sign {
                    self.with_usage += 1;
                } else {
                    self.with_usage -= 1;
                }
            }
        }
    }

    /// The slot of a message newly at its position: the remembered count when the id and
    /// fingerprint match, else a fresh count — or, with `exact` off and a BPE counter, only the
    /// bound (the count follows in [`Tally::count_all`] when it is needed).
    fn slot_for(&mut self, counter: &TokenCounter, m: &Arc<Message>, exact: bool) -> Slot {
        let fp = message_fingerprint(m);
        let (tokens, bound) = match m.id().and_then(|id| self.by_id.get(id)) {
            Some(&(f, t)) if f == fp => (Some(t), t),
            _ if exact || !counter.is_bpe() => {
                let t = counter.count_message(m);
                if let Some(id) = m.id() {
                    self.by_id.insert(id.to_owned(), (fp, t));
                }
                (Some(t), t)
            }
            _ => (None, counter.upper_bound_message(m)),
        };
        Slot {
            ptr: Arc::downgrade(m),
            tokens,
            bound,
            ai: ai_mark(m),
        }
    }

    /// Count every slot that has only a bound (O(len) scan, only while some are uncounted).
    fn count_all(&mut self, counter: &TokenCounter, msgs: &[Arc<Message>]) {
        if self.uncounted == 0 {
            return;
        }
        for (slot, m) in self.slots.iter_mut().zip(msgs) {
            if slot.tokens.is_none() {
                let t = counter.count_message(m);
                if let Some(id) = m.id() {
                    self.by_id
                        .insert(id.to_owned(), (message_fingerprint(m), t));
                }
                slot.tokens = Some(t);
                self.total += t;
                // The bound becomes the count, so both totals stay sums over the slots.
                self.bound_total = self.bound_total - slot.bound + t;
                slot.bound = t;
            }
        }
        self.uncounted = 0;
    }

    /// Bring the tally in line with `msgs`: O(len) pointer comparisons, counting only messages
    /// not seen at that position before (with `exact` off, bounding them instead).
    fn sync(&mut self, counter: &TokenCounter, msgs: &[Arc<Message>], exact: bool) {
        while self.slots.len() > msgs.len() {
            self.addrs.pop();
            if let Some(old) = self.slots.pop() {
                self.account(&old, false);
            }
        }
        let same = shared_prefix_addrs(&self.addrs, msgs);
        for (i, m) in msgs.iter().enumerate().skip(same) {
            let addr = address(m);
            if self.addrs.get(i) == Some(&addr) {
                continue;
            }
            let slot = self.slot_for(counter, m, exact);
            self.account(&slot, true);
            if i < self.slots.len() {
                let old = std::mem::replace(&mut self.slots[i], slot);
                self.addrs[i] = addr;
                self.account(&old, false);
            } else {
                self.slots.push(slot);
                self.addrs.push(addr);
            }
        }
        // Forget ids of messages that left the list (amortized: only when the map has grown).
        if self.by_id.len() > 2 * self.slots.len() + 64 {
            let live: std::collections::HashSet<&str> =
                msgs.iter().filter_map(|m| m.id()).collect();
            self.by_id.retain(|id, _| live.contains(id.as_str()));
        }
        if exact {
            self.count_all(counter, msgs);
        }
    }

    /// Let go of the messages' allocations (each slot's `Weak`), keeping the counts: the next
    /// sync finds every message at a new address and takes its count from `by_id` (a fingerprint,
    /// no tokenizing) or its bound.
    fn release(&mut self) {
        for s in &mut self.slots {
            s.ptr = Weak::new();
        }
        self.addrs.fill(0);
    }

    fn measure(&self) -> Measure {
        let total = self.total;
        let mut scaled = total;
        if self.slots.len() > 1 && self.providers.len() == 1 && self.with_usage > 0 {
            let mut after = 0usize;
            for s in self.slots.iter().rev() {
                if let Some(u) = s.ai.as_ref().and_then(|a| a.usage_total) {
                    let through = total - after;
                    if through > 0 {
                        let ratio = (u as f64 / through as f64).clamp(1.0, 1.25);
                        scaled = (total as f64 * ratio) as usize;
                    }
                    break;
                }
                after += s.tokens.unwrap_or(s.bound);
            }
        }
        Measure { total, scaled }
    }
}

/// Most threads tallied at once; the least recently used is forgotten beyond this.
const MAX_THREADS: usize = 512;
/// Most messages tallied across threads (a slot's `Weak` keeps its message's allocation, a few
/// hundred bytes, alive): ~1,000 threads of 60 messages, or 60 of 1,000. Checked when a thread's
/// tally is created, so the total may pass it by that thread's messages.
const MAX_SLOTS: usize = 65_536;
/// Most entries in the id-keyed memo of [`CachedTokenCounter::count_message`].
const MAX_MEMO: usize = 4096;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A [`TokenCounter`] with memory: per-message counts keyed by id and content fingerprint, and a
/// running total per thread. Thread-safe; share it as `Arc<CachedTokenCounter>`.
pub struct CachedTokenCounter {
    counter: TokenCounter,
    threads: Mutex<HashMap<String, Arc<Mutex<Tally>>>>,
    memo: Mutex<HashMap<String, (u64, usize)>>,
    clock: AtomicU64,
    /// Slots of every tally together, and their bound (see [`MAX_SLOTS`]).
    slots: AtomicUsize,
    max_slots: usize,
}

impl std::fmt::Debug for CachedTokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedTokenCounter")
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl CachedTokenCounter {
    pub fn new(counter: TokenCounter) -> Self {
        CachedTokenCounter {
            counter,
            threads: Mutex::new(HashMap::new()),
            memo: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            slots: AtomicUsize::new(0),
            max_slots: MAX_SLOTS,
        }
    }

    /// As [`CachedTokenCounter::new`] with another bound on the messages tallied at once.
    pub fn with_max_slots(counter: TokenCounter, max_slots: usize) -> Self {
        CachedTokenCounter {
            max_slots,
            ..CachedTokenCounter::new(counter)
        }
    }

    /// Messages tallied across threads.
    pub fn tallied_messages(&self) -> usize {
        self.slots.load(Ordering::Relaxed)
    }

    /// Sync `key`'s tally with `msgs` and keep the slot total current.
    fn synced(&self, key: &str, msgs: &[Arc<Message>], exact: bool) -> Arc<Mutex<Tally>> {
        let tally = self.tally(key);
        {
            let mut t = lock(&tally);
            let before = t.slots.len();
            t.sync(&self.counter, msgs, exact);
            let after = t.slots.len();
            if t.detached {
                // Evicted while this call held it: counted no more.
            } else if after >= before {
                self.slots.fetch_add(after - before, Ordering::Relaxed);
            } else {
                self.slots.fetch_sub(before - after, Ordering::Relaxed);
            }
        }
        tally
    }

    /// Forget a tally taken out of the map.
    fn dropped(&self, tally: &Arc<Mutex<Tally>>) {
        let mut t = lock(tally);
        t.detached = true;
        self.slots.fetch_sub(t.slots.len(), Ordering::Relaxed);
    }

    pub fn counter(&self) -> &TokenCounter {
        &self.counter
    }

    /// Tokens of one message, remembered by id and fingerprint (messages without an id are
    /// counted every time).
    pub fn count_message(&self, m: &Message) -> usize {
        let Some(id) = m.id() else {
            return self.counter.count_message(m);
        };
        let fp = message_fingerprint(m);
        if let Some(&(f, t)) = lock(&self.memo).get(id) {
            if f == fp {
                return t;
            }
        }
        let t = self.counter.count_message(m);
        let mut memo = lock(&self.memo);
        if memo.len() >= MAX_MEMO {
            memo.clear();
        }
        memo.insert(id.to_owned(), (fp, t));
        t
    }

    fn tally(&self, key: &str) -> Arc<Mutex<Tally>> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut threads = lock(&self.threads);
        if let Some(t) = threads.get(key) {
            let t = t.clone();
            drop(threads);
            lock(&t).last_used = now;
            return t;
        }
        // Least recently used first, beyond the thread count or the slot total (each slot keeps
        // its message's allocation alive; finished threads' tallies must not pile up).
        while !threads.is_empty()
            && (threads.len() >= MAX_THREADS || self.slots.load(Ordering::Relaxed) > self.max_slots)
        {
            let oldest = threads
                .iter()
                .min_by_key(|(_, t)| lock(t).last_used)
                .map(|(k, _)| k.clone());
            match oldest.and_then(|k| threads.remove(&k)) {
                Some(t) => self.dropped(&t),
                None => break,
            }
        }
        let t = Arc::new(Mutex::new(Tally {
            last_used: now,
            ..Tally::default()
        }));
        threads.insert(key.to_owned(), t.clone());
        t
    }

    /// Totals of a thread's message list (`key` is usually the thread id). Costs a pointer
    /// comparison per message plus counting the messages that are new or were replaced since the
    /// previous call with the same key.
    pub fn measure(&self, key: &str, msgs: &[Arc<Message>]) -> Measure {
        let tally = self.synced(key, msgs, true);
        let t = lock(&tally);
        t.measure()
    }

    /// An upper bound of [`Measure::scaled`] for a thread's message list that tokenizes nothing
    /// (see [`TokenCounter::upper_bound_message`]): a trigger below it needs the exact
    /// [`CachedTokenCounter::measure`], one above it is not reached. Same O(new messages) cost as
    /// `measure`, and messages bounded here are counted later only if `measure` is called.
    pub fn bound(&self, key: &str, msgs: &[Arc<Message>]) -> usize {
        let tally = self.synced(key, msgs, false);
        let t = lock(&tally);
        // The provider calibration scales by at most 1.25 (see `Measure::scaled`).
        t.bound_total.saturating_add(t.bound_total / 4 + 1)
    }

    /// [`Measure::total`] of a thread's message list.
    pub fn total(&self, key: &str, msgs: &[Arc<Message>]) -> usize {
        self.measure(key, msgs).total
    }

    /// The count of each message of a thread's list, in order (from the tally).
    pub fn counts(&self, key: &str, msgs: &[Arc<Message>]) -> Vec<usize> {
        let tally = self.synced(key, msgs, true);
        let t = lock(&tally);
        t.slots
            .iter()
            .map(|s| s.tokens.unwrap_or(s.bound))
            .collect()
    }

    /// The tally key of one message list of a thread (a thread's lead agent and each subagent
    /// keep their own list): what [`CachedTokenCounter::release_thread`] matches.
    pub fn thread_key(thread_id: &str, list: &str) -> String {
        format!("{thread_id}\u{1f}{list}")
    }

    /// A thread's runs are over for now: its tallies (the key `thread_id` and every
    /// [`CachedTokenCounter::thread_key`] of it) stop holding their messages' allocations. The
    /// counts stay, so the next run re-checks each message by fingerprint once instead of
    /// tokenizing it again, and finished threads cost a few dozen bytes per message instead of
    /// keeping every message's allocation alive until the tally is evicted.
    pub fn release_thread(&self, thread_id: &str) {
        let tallies: Vec<Arc<Mutex<Tally>>> = lock(&self.threads)
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(thread_id)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('\u{1f}'))
            })
            .map(|(_, t)| t.clone())
            .collect();
        for t in tallies {
            lock(&t).release();
        }
    }

    /// Drop a thread's tally (e.g. when the thread is deleted).
    pub fn forget(&self, key: &str) {
        let gone = lock(&self.threads).remove(key);
        if let Some(t) = gone {
            self.dropped(&t);
        }
    }
}
