//! Token counting: tiktoken encodings per model (offline), the approximate counters DeerFlow
//! uses, and the cached counter's O(new messages) bookkeeping.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use antler_models::tokens::{message_fingerprint, CachedTokenCounter, Encoding, TokenCounter};
use antler_protocol::{
    AiMessage, Content, HumanMessage, Message, Object, ToolCall, ToolMessage, UsageMetadata,
};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn human(id: &str, text: &str) -> Message {
    Message::Human(HumanMessage {
        content: text.into(),
        id: Some(id.into()),
        ..Default::default()
    })
}

fn arcs(msgs: &[Message]) -> Vec<Arc<Message>> {
    msgs.iter().cloned().map(Arc::new).collect()
}

#[test]
fn models_map_to_the_encodings_tiktoken_uses() {
    let cases = [
        ("gpt-4o-mini", Some(Encoding::O200kBase)),
        ("gpt-4o", Some(Encoding::O200kBase)),
        ("gpt-4.1-nano", Some(Encoding::O200kBase)),
        ("gpt-5", Some(Encoding::O200kBase)),
        ("o3-mini", Some(Encoding::O200kBase)),
        ("openai/gpt-4o", Some(Encoding::O200kBase)),
        ("gpt-4", Some(Encoding::Cl100kBase)),
        ("gpt-3.5-turbo-0125", Some(Encoding::Cl100kBase)),
        ("text-davinci-003", Some(Encoding::P50kBase)),
        // Everything else counts with DeerFlow's cl100k_base.
        ("deepseek-chat", Some(Encoding::Cl100kBase)),
        ("qwen-max", Some(Encoding::Cl100kBase)),
        ("", Some(Encoding::Cl100kBase)),
        // Anthropic has no public tokenizer: approximate counter.
        ("claude-sonnet-4-5", None),
        ("anthropic/claude-3-haiku", None),
    ];
    for (model, enc) in cases {
        assert_eq!(TokenCounter::for_model(model).encoding(), enc, "{model}");
    }
    assert_eq!(
        TokenCounter::default().encoding(),
        Some(Encoding::Cl100kBase)
    );
    assert_eq!(Encoding::O200kBase.name(), "o200k_base");
}

#[test]
fn bpe_counts_match_tiktoken_and_need_no_network() {
    // The tables are embedded: these run offline.
    let cl = TokenCounter::with_encoding(Encoding::Cl100kBase);
    assert_eq!(cl.count_text("hello world"), 2);
    assert_eq!(cl.count_text("tiktoken is great!"), 6);
    assert_eq!(cl.count_text(""), 0);
    let o = TokenCounter::with_encoding(Encoding::O200kBase);
    assert_eq!(o.count_text("hello world"), 2);
    // Both agree with tiktoken-rs itself on a longer text.
    let text = "The quick brown fox jumps over the lazy dog. 敏捷的棕色狐狸跳过了懒狗。\n";
    assert_eq!(
        cl.count_text(text),
        tiktoken_rs::cl100k_base()
            .unwrap()
            .encode_ordinary(text)
            .len()
    );
    assert_eq!(
        o.count_text(text),
        tiktoken_rs::o200k_base()
            .unwrap()
            .encode_ordinary(text)
            .len()
    );
}

#[test]
fn bpe_message_counts_add_framing_name_tool_calls_and_images() {
    let c = TokenCounter::with_encoding(Encoding::Cl100kBase);
    // 3 framing + 1 role + 2 text.
    assert_eq!(c.count_message(&Message::human("hello world")), 6);
    let mut named = HumanMessage {
        content: "hello world".into(),
        name: Some("bob".into()),
        ..Default::default()
    };
    // + name text (1) + 1 for having a name.
    assert_eq!(c.count_message(&Message::Human(named.clone())), 8);
    named.content = Content::Blocks(vec![
        json!({"type": "text", "text": "hello world"}),
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
    ]);
    assert_eq!(c.count_message(&Message::Human(named)), 8 + 85);

    let mut args = Object::new();
    args.insert("command".into(), json!("ls"));
    let ai = Message::Ai(AiMessage {
        tool_calls: vec![ToolCall::new("c1", "bash", args)].into(),
        ..Default::default()
    });
    let expected = 4 + c.count_text("bash") + c.count_text(r#"{"command":"ls"}"#);
    assert_eq!(c.count_message(&ai), expected);
    let tool = Message::Tool(ToolMessage::new("call_abc", "ok"));
    assert_eq!(
        c.count_message(&tool),
        4 + c.count_text("ok") + c.count_text("call_abc")
    );
}

#[test]
fn the_approximate_counter_is_langchains() {
    let c = TokenCounter::approximate();
    // ceil((11 chars + "user") / 4) + 3
    assert_eq!(c.count_message(&Message::human("hello world")), 4 + 3);
    assert_eq!(c.count_text("abcdefgh"), 2);
    assert_eq!(c.count_text("abcdefghi"), 3);
    // Anthropic models: 3.3 chars per token.
    let a = TokenCounter::for_model("claude-3-5-sonnet");
    assert_eq!(a.count_text(&"x".repeat(33)), 10);
    assert_eq!(
        a.count_message(&Message::human("x".repeat(29))),
        // (29 + 4) / 3.3 = 10, + 3
        13
    );
    // Images cost a flat 85.
    let img = Message::Human(HumanMessage {
        content: Content::Blocks(vec![
            json!({"type": "image_url", "image_url": {"url": "x"}}),
        ]),
        ..Default::default()
    });
    assert_eq!(c.count_message(&img), 1 + 3 + 85);
}

#[test]
fn the_char_estimate_is_cjk_aware() {
    let c = TokenCounter::char_estimate();
    assert_eq!(c.count_text("abcdefgh"), 2);
    assert_eq!(c.count_text("你好世界"), 2);
    assert_eq!(c.count_text("abcd你好"), 2);
}

#[test]
fn custom_counters_count_pieces_without_framing() {
    let c = TokenCounter::custom(|t| t.chars().count());
    assert_eq!(c.count_message(&Message::human("hello")), 5);
    assert_eq!(c.count_text("héllo"), 5);
}

#[test]
fn long_runs_and_huge_texts_are_bounded() {
    let c = TokenCounter::with_encoding(Encoding::Cl100kBase);
    // A 100 kB separator line: estimated at ~3 chars per token instead of quadratic BPE.
    let dashes = "-".repeat(100_000);
    let n = c.count_text(&dashes);
    assert!((30_000..=40_000).contains(&n), "{n}");
    // The same for padding.
    let padded = format!("a{}b", " ".repeat(10_000));
    assert_eq!(c.count_text(&padded), 1 + 3334 + 1);
    // Ordinary words around a long run are still tokenized exactly.
    let mixed = format!("hello world {} hello world", "=".repeat(1000));
    assert_eq!(
        c.count_text(&mixed),
        c.count_text("hello world ") + 334 + c.count_text(" hello world")
    );
    // A text over 64 kB is extrapolated from its head: close to the exact count.
    let big = "lorem ipsum dolor sit amet ".repeat(5000);
    let exact = tiktoken_rs::cl100k_base()
        .unwrap()
        .encode_ordinary(&big)
        .len();
    let got = c.count_text(&big);
    assert!(got.abs_diff(exact) * 100 <= exact, "{got} vs {exact}");
}

#[test]
fn fingerprints_follow_what_is_counted() {
    let a = human("h1", "hello");
    let mut b = a.clone();
    assert_eq!(message_fingerprint(&a), message_fingerprint(&b));
    b.additional_kwargs_mut()
        .insert("run_id".into(), json!("r1"));
    // Metadata the model does not see does not change the count.
    assert_eq!(message_fingerprint(&a), message_fingerprint(&b));
    *b.content_mut() = "hello!".into();
    assert_ne!(message_fingerprint(&a), message_fingerprint(&b));
}

/// A counter that records how many texts it tokenized.
fn counting() -> (TokenCounter, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let counter = TokenCounter::custom(move |t| {
        c.fetch_add(1, Ordering::SeqCst);
        t.chars().count()
    });
    (counter, calls)
}

#[test]
fn the_cache_counts_only_new_and_changed_messages() {
    let (counter, calls) = counting();
    let cache = CachedTokenCounter::new(counter);
    let mut list: Vec<Message> = (0..1000).map(|i| human(&format!("m{i}"), "abcd")).collect();
    let mut msgs = arcs(&list);
    assert_eq!(cache.total("t1", &msgs), 4000);
    assert_eq!(calls.load(Ordering::SeqCst), 1000);

    // The same list again: nothing is tokenized.
    assert_eq!(cache.total("t1", &msgs), 4000);
    assert_eq!(calls.load(Ordering::SeqCst), 1000);

    // Two new messages: two more texts.
    msgs.push(Arc::new(human("n1", "abcdefgh")));
    msgs.push(Arc::new(human("n2", "ab")));
    assert_eq!(cache.total("t1", &msgs), 4010);
    assert_eq!(calls.load(Ordering::SeqCst), 1002);

    // A replacement in place (same id, new content) is recounted; the total follows.
    msgs[500] = Arc::new(human("m500", "abcdefghijkl"));
    assert_eq!(cache.total("t1", &msgs), 4018);
    assert_eq!(calls.load(Ordering::SeqCst), 1003);

    // A rebuilt list (a reload from the store, or a remove-all keeping a tail: new allocations,
    // same ids and content) reuses the counts by id.
    list = msgs.iter().map(|m| (**m).clone()).collect();
    let reloaded = arcs(&list);
    assert_eq!(cache.total("t1", &reloaded), 4018);
    assert_eq!(calls.load(Ordering::SeqCst), 1003);
    let tail = arcs(&list[900..]);
    assert_eq!(cache.total("t1", &tail), 400 + 8 + 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1003);

    // Per-message counts come from the tally.
    let counts = cache.counts("t1", &tail);
    assert_eq!(counts.len(), 102);
    assert_eq!(counts[101], 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1003);

    // Another thread has its own tally (same ids, different text).
    let other = arcs(&[human("m0", "xy")]);
    assert_eq!(cache.total("t2", &other), 2);
    cache.forget("t2");
    assert_eq!(cache.total("t2", &other), 2);
}

#[test]
fn a_released_thread_keeps_its_counts_but_not_its_messages() {
    let (counter, calls) = counting();
    let cache = CachedTokenCounter::new(counter);
    let lead = CachedTokenCounter::thread_key("t1", "lead_agent");
    let sub = CachedTokenCounter::thread_key("t1", "general-purpose");
    let other = CachedTokenCounter::thread_key("t10", "lead_agent");
    let msgs = arcs(
        &(0..50)
            .map(|i| human(&format!("m{i}"), "abcd"))
            .collect::<Vec<_>>(),
    );
    for key in [&lead, &sub, &other] {
        assert_eq!(cache.total(key, &msgs), 200);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 150);
    // Every tally holds a `Weak` to each message: the allocations outlive the messages.
    assert_eq!(Arc::weak_count(&msgs[0]), 3);

    cache.release_thread("t1");
    // Both of t1's lists let go; t10 (same prefix, another thread) keeps its hold.
    assert_eq!(Arc::weak_count(&msgs[0]), 1);
    assert!(msgs.iter().all(|m| Arc::weak_count(m) == 1));

    // The next run finds the counts by id and fingerprint: nothing is tokenized again, and an
    // edited message is still recounted.
    let mut reloaded: Vec<Arc<Message>> = msgs.iter().map(|m| Arc::new((**m).clone())).collect();
    assert_eq!(cache.total(&lead, &reloaded), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 150);
    reloaded[7] = Arc::new(human("m7", "abcdefgh"));
    assert_eq!(cache.total(&lead, &reloaded), 204);
    assert_eq!(calls.load(Ordering::SeqCst), 151);
    assert_eq!(cache.tallied_messages(), 150);
}

/// Once released, a tally vouches for no address: messages that take over the freed
/// allocations (new ids, new text) are counted as what they are.
#[test]
fn a_released_tally_does_not_match_reused_addresses() {
    let (counter, _) = counting();
    let cache = CachedTokenCounter::new(counter);
    let first = arcs(
        &(0..50)
            .map(|i| human(&format!("a{i}"), "abcd"))
            .collect::<Vec<_>>(),
    );
    assert_eq!(cache.total("t1", &first), 200);
    cache.release_thread("t1");
    let before: Vec<usize> = first.iter().map(|m| Arc::as_ptr(m) as usize).collect();
    // Each message freed just before its successor is allocated: the allocator hands the same
    // block out again, at the same position of the list.
    let mut second = Vec::with_capacity(first.len());
    for (i, m) in first.into_iter().enumerate() {
        drop(m);
        second.push(Arc::new(human(&format!("b{i}"), "abcdefgh")));
    }
    let reused = (0..second.len())
        .filter(|&i| Arc::as_ptr(&second[i]) as usize == before[i])
        .count();
    assert_eq!(cache.total("t1", &second), 400, "{reused} addresses reused");
}

#[test]
fn count_message_is_memoized_by_id_and_content() {
    let (counter, calls) = counting();
    let cache = CachedTokenCounter::new(counter);
    let m = human("a", "hello");
    assert_eq!(cache.count_message(&m), 5);
    assert_eq!(cache.count_message(&m.clone()), 5);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(cache.count_message(&human("a", "hello there")), 11);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Without an id nothing is remembered.
    cache.count_message(&Message::human("x"));
    cache.count_message(&Message::human("x"));
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

fn ai_with_usage(id: &str, text: &str, total: Option<u64>, provider: Option<&str>) -> Message {
    let mut response_metadata = Object::new();
    if let Some(p) = provider {
        response_metadata.insert("model_provider".into(), Value::from(p));
    }
    Message::Ai(AiMessage {
        content: text.into(),
        id: Some(id.into()),
        response_metadata: response_metadata.into(),
        usage_metadata: total.map(|t| UsageMetadata::new(t, 0)),
        ..Default::default()
    })
}

#[test]
fn usage_metadata_scales_the_estimate_within_bounds() {
    let chars = || CachedTokenCounter::new(TokenCounter::custom(|t| t.chars().count()));
    // Estimate up to the AI message: 10 + 10 = 20; provider said 22 → ×1.1 on the whole total.
    let msgs = arcs(&[
        human("h", &"x".repeat(10)),
        ai_with_usage("a", &"y".repeat(10), Some(22), Some("openai")),
        human("h2", &"z".repeat(10)),
    ]);
    let m = chars().measure("t", &msgs);
    assert_eq!(m.total, 30);
    assert_eq!(m.scaled, 33);

    // Clamped to 1.25 above …
    let msgs = arcs(&[
        human("h", &"x".repeat(10)),
        ai_with_usage("a", &"y".repeat(10), Some(1000), Some("openai")),
    ]);
    assert_eq!(chars().measure("t", &msgs).scaled, 25);
    // … and never scaled down.
    let msgs = arcs(&[
        human("h", &"x".repeat(10)),
        ai_with_usage("a", &"y".repeat(10), Some(5), Some("openai")),
    ]);
    assert_eq!(chars().measure("t", &msgs).scaled, 20);

    // The latest AI message with usage is the anchor.
    let msgs = arcs(&[
        human("h", &"x".repeat(10)),
        ai_with_usage("a1", &"y".repeat(10), Some(1000), Some("openai")),
        ai_with_usage("a2", &"y".repeat(10), Some(33), Some("openai")),
        ai_with_usage("a3", &"y".repeat(10), None, Some("openai")),
    ]);
    let m = chars().measure("t", &msgs);
    assert_eq!((m.total, m.scaled), (40, 44));

    // Mixed providers: no scaling.
    let msgs = arcs(&[
        human("h", &"x".repeat(10)),
        ai_with_usage("a1", &"y".repeat(10), Some(1000), Some("openai")),
        ai_with_usage("a2", &"y".repeat(10), None, Some("anthropic")),
    ]);
    let m = chars().measure("t", &msgs);
    assert_eq!((m.total, m.scaled), (30, 30));

    // A single message: no scaling.
    let msgs = arcs(&[ai_with_usage("a", "y", Some(1000), None)]);
    let m = chars().measure("t", &msgs);
    assert_eq!((m.total, m.scaled), (1, 1));

    // The tally follows a provider change when a message is replaced.
    let cache = chars();
    let mut msgs = arcs(&[
        human("h", &"x".repeat(10)),
        ai_with_usage("a1", &"y".repeat(10), Some(22), Some("openai")),
        ai_with_usage("a2", &"y".repeat(10), None, Some("anthropic")),
    ]);
    assert_eq!(cache.measure("t", &msgs).scaled, 30);
    msgs[2] = Arc::new(ai_with_usage("a2", &"y".repeat(10), None, Some("openai")));
    assert_eq!(cache.measure("t", &msgs).scaled, 33);
}

#[test]
fn the_cache_is_shared_across_threads() {
    let cache = Arc::new(CachedTokenCounter::new(TokenCounter::with_encoding(
        Encoding::Cl100kBase,
    )));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                let mut msgs = Vec::new();
                let mut totals = Vec::new();
                for i in 0..50 {
                    msgs.push(Arc::new(human(&format!("{t}-{i}"), "hello world")));
                    totals.push(cache.total(&format!("thread-{t}"), &msgs));
                }
                totals
            })
        })
        .collect();
    for h in handles {
        let totals = h.join().unwrap();
        assert_eq!(totals, (1..=50).map(|n| n * 6).collect::<Vec<_>>());
    }
}

/// Messages of every shape the bound has to cover: prose, CJK, a long unbroken run, a long
/// whitespace run, tool calls, a tool result, a name and an image block.
fn assorted() -> Vec<Message> {
    let mut v = vec![
        human("a", "Hello there, how are you today? Fine, thanks."),
        human("b", "你好，世界。这是一个测试。日本語のテキストも。"),
        human("c", &"x".repeat(5000)),
        human("d", &format!("start{}end", " ".repeat(3000))),
        human("e", &"lorem ipsum dolor sit amet ".repeat(4000)),
    ];
    let call: Message = serde_json::from_value(json!({
        "type": "ai", "id": "f", "content": "",
        "tool_calls": [{"id": "call_1", "name": "bash", "args": {"command": "ls -la /mnt/user-data"}}],
    }))
    .unwrap();
    let result: Message = serde_json::from_value(json!({
        "type": "tool", "id": "g", "tool_call_id": "call_1", "name": "bash",
        "content": [{"type": "text", "text": "total 0"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
    }))
    .unwrap();
    v.push(call);
    v.push(result);
    v
}

#[test]
fn the_bound_is_never_below_the_count() {
    for enc in [Encoding::Cl100kBase, Encoding::O200kBase] {
        let counter = TokenCounter::with_encoding(enc);
        for m in assorted() {
            let (count, bound) = (counter.count_message(&m), counter.upper_bound_message(&m));
            assert!(count <= bound, "{enc:?} {:?}: {count} > {bound}", m.id());
        }
        let msgs = arcs(&assorted());
        let cache = CachedTokenCounter::new(counter);
        let bound = cache.bound("t", &msgs);
        let measured = cache.measure("t", &msgs);
        assert!(measured.scaled <= bound, "{measured:?} > {bound}");
    }
    // Cheap counters bound with the count itself.
    let approx = TokenCounter::approximate();
    for m in assorted() {
        assert_eq!(approx.upper_bound_message(&m), approx.count_message(&m));
    }
}

#[test]
fn bounding_counts_nothing_and_a_later_measure_counts_each_message_once() {
    let counter = TokenCounter::with_encoding(Encoding::Cl100kBase);
    let list = assorted();
    let exact: usize = list.iter().map(|m| counter.count_message(m)).sum();
    let mut msgs = arcs(&list);
    let cache = CachedTokenCounter::new(counter.clone());
    let first = cache.bound("t", &msgs);
    assert!(first >= exact);
    assert_eq!(cache.total("t", &msgs), exact);
    // Once counted, the bound tightens to the exact total (plus the calibration margin).
    assert_eq!(cache.bound("t", &msgs), exact + exact / 4 + 1);
    // New messages are bounded again; measuring picks them up exactly.
    msgs.push(Arc::new(human("h", "one more message")));
    let grown = exact + counter.count_message(&msgs[msgs.len() - 1]);
    assert!(cache.bound("t", &msgs) >= grown);
    assert_eq!(cache.total("t", &msgs), grown);
    // Dropping a bounded-only message keeps the totals consistent.
    msgs.push(Arc::new(human("i", "bounded only")));
    let _ = cache.bound("t", &msgs);
    msgs.pop();
    assert_eq!(cache.total("t", &msgs), grown);
    assert_eq!(cache.counts("t", &msgs).iter().sum::<usize>(), grown);
}

/// The point of the bound: a short thread never builds a BPE table. `p50k_base` is used by no
/// other test in this binary, so its table is built only by this test's `measure`.
#[test]
fn a_bound_builds_no_bpe_table() {
    let cache = CachedTokenCounter::new(TokenCounter::with_encoding(Encoding::P50kBase));
    let msgs = arcs(&assorted());
    assert!(cache.bound("t", &msgs) > 0);
    assert!(!Encoding::P50kBase.is_built());
    let _ = cache.measure("t", &msgs);
    assert!(Encoding::P50kBase.is_built());
}

#[test]
fn tallies_are_bounded_by_messages_across_threads() {
    let chars = || TokenCounter::custom(|t| t.chars().count());
    let cache = CachedTokenCounter::with_max_slots(chars(), 100);
    let list = |thread: &str| -> Vec<Arc<Message>> {
        let msgs: Vec<Message> = (0..60)
            .map(|i| human(&format!("{thread}-{i}"), "abcd"))
            .collect();
        arcs(&msgs)
    };
    let (a, b, c) = (list("a"), list("b"), list("c"));
    let first = cache.measure("a", &a);
    cache.measure("b", &b);
    assert_eq!(cache.tallied_messages(), 120);
    // A new thread's tally first evicts the least recently used while the total is past the
    // bound (120 > 100: `a` goes), then adds its own: 180 without the bound.
    cache.measure("c", &c);
    assert_eq!(cache.tallied_messages(), 120);
    // An evicted thread is counted again, to the same result (and evicts `b`).
    assert_eq!(cache.measure("a", &a).total, first.total);
    assert_eq!(cache.tallied_messages(), 120);
    cache.forget("a");
    cache.forget("c");
    assert_eq!(cache.tallied_messages(), 0, "b was evicted before");
}
