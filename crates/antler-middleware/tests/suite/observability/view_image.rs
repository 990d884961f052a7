//! ViewImageMiddleware: DeerFlow's `test_view_image_middleware.py` expectations, plus the image
//! context through the agent loop (seen by the model once, never persisted).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use antler_middleware::view_image::{
    image_blocks, is_image_context, should_inject, ViewImageMiddleware, CONTEXT_ID_PREFIX,
    CONTEXT_MARKER_KEY, HEADER_TEXT, NO_IMAGES_TEXT,
};
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::{Content, HumanMessage, Message, StateUpdate, ThreadState};
use antler_runtime::*;
use pretty_assertions::assert_eq;
use serde_json::{json, Map, Value};

use super::common::*;
use crate::common::run_ok;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// The uploads folder of `thread` under the data home `home` (created).
fn uploads_of(home: &Path, thread: &str) -> PathBuf {
    let up = home.join("threads").join(thread).join("user-data/uploads");
    std::fs::create_dir_all(&up).unwrap();
    up
}

/// [`image_blocks`] reading only under `root`.
fn image_blocks_at(root: &Path, viewed: &Map<String, Value>) -> Vec<Value> {
    image_blocks(viewed, root)
}

/// Write `data` to `dir/name` and return its `viewed_images` entry.
fn viewed(dir: &Path, name: &str, mime: &str, data: &[u8]) -> Value {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    json!({"mime_type": mime, "size": data.len(), "actual_path": p})
}

fn map(entries: &[(&str, Value)]) -> Map<String, Value> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn view_call(id: &str) -> (&str, &str, Value) {
    (
        id,
        "view_image",
        json!({"image_path": "/mnt/user-data/uploads/img.png"}),
    )
}

fn refs(msgs: &[Message]) -> Vec<&Message> {
    msgs.iter().collect()
}

fn human_with(content: impl Into<Content>) -> Message {
    Message::Human(HumanMessage {
        content: content.into(),
        ..Default::default()
    })
}

/// A completed `view_image` turn that viewed `img.png` in thread `t`'s uploads under `home`.
fn one_viewed_image(home: &Path) -> ThreadState {
    let up = uploads_of(home, "t");
    completed_state(map(&[(
        "/img.png",
        viewed(&up, "img.png", "image/png", PNG),
    )]))
}

/// The messages a fresh middleware over the data home `home` injects before the next call.
async fn injected_under(home: &Path, s: &ThreadState) -> Vec<Message> {
    update_messages(
        &ViewImageMiddleware::new(home)
            .before_model(s, &run_ctx("t", "r"))
            .await
            .unwrap()
            .update,
    )
}

fn completed_state(viewed_images: Map<String, Value>) -> ThreadState {
    let mut s = state(vec![
        Message::Ai(ai_calls(&[view_call("c1")])),
        tool_msg("c1", "ok"),
    ]);
    s.viewed_images = viewed_images;
    s
}

fn b64_of(url: &str) -> &str {
    url.split_once(";base64,").map(|(_, b)| b).unwrap_or("")
}

#[test]
fn needs_a_last_ai_message_with_a_view_image_call() {
    assert!(!should_inject(&[]));
    assert!(!should_inject(&refs(&[Message::human("hello")])));
    let no_calls = [Message::ai("just text")];
    assert!(!should_inject(&refs(&no_calls)));
    let other = [
        Message::Ai(ai_calls(&[(
            "call_other",
            "bash",
            json!({"command": "ls"}),
        )])),
        tool_msg("call_other", "ok"),
    ];
    assert!(!should_inject(&refs(&other)));
    let mixed = [
        Message::Ai(ai_calls(&[
            ("call_other", "bash", json!({"command": "ls"})),
            view_call("call_vi"),
        ])),
        tool_msg("call_other", "ok"),
        tool_msg("call_vi", "ok"),
    ];
    assert!(should_inject(&refs(&mixed)));
    // Only the most recent AI message counts.
    let older = [
        Message::Ai(ai_calls(&[view_call("c1")])),
        tool_msg("c1", "ok"),
        Message::ai("newer"),
    ];
    assert!(!should_inject(&refs(&older)));
}

#[test]
fn every_call_of_that_message_must_be_answered_after_it() {
    let all = [
        Message::Ai(ai_calls(&[view_call("c1"), view_call("c2")])),
        tool_msg("c1", "ok"),
        tool_msg("c2", "ok"),
    ];
    assert!(should_inject(&refs(&all)));
    let some = [
        Message::Ai(ai_calls(&[view_call("c1"), view_call("c2")])),
        tool_msg("c1", "ok"),
    ];
    assert!(!should_inject(&refs(&some)));
    let unanswered = [Message::Ai(ai_calls(&[view_call("c1")]))];
    assert!(!should_inject(&refs(&unanswered)));
    // A stale tool message before the AI message does not answer it.
    let stale = [
        tool_msg("c1", "stale"),
        Message::Ai(ai_calls(&[view_call("c1")])),
    ];
    assert!(!should_inject(&refs(&stale)));
}

#[test]
fn an_existing_image_context_or_legacy_header_prevents_reinjection() {
    let dir = scratch();
    let entry = viewed(dir.path(), "img.png", "image/png", PNG);
    let base = |extra: Message| {
        vec![
            Message::Ai(ai_calls(&[view_call("c1")])),
            tool_msg("c1", "ok"),
            extra,
        ]
    };
    let legacy = base(human_with("Here are the images you've viewed: /img.png"));
    assert!(!should_inject(&refs(&legacy)));
    let legacy_details = base(human_with(
        "Here are the details of the images you've viewed: ...",
    ));
    assert!(!should_inject(&refs(&legacy_details)));
    let real_blocks = image_blocks_at(dir.path(), &map(&[("/img.png", entry)]));
    let list = base(human_with(Content::Blocks(real_blocks.clone())));
    assert!(!should_inject(&refs(&list)));
    let marked = base(antler_middleware::view_image::image_context_message(
        real_blocks,
    ));
    assert!(!should_inject(&refs(&marked)));
    let unrelated = base(human_with("what do you see?"));
    assert!(should_inject(&refs(&unrelated)));
}

#[test]
fn content_blocks_for_no_one_and_several_images() {
    assert_eq!(
        image_blocks(&Map::new(), Path::new("/nonexistent")),
        vec![json!({"type": "text", "text": NO_IMAGES_TEXT})]
    );
    let dir = scratch();
    let one = image_blocks_at(
        dir.path(),
        &map(&[(
            "/path/to/cat.png",
            viewed(dir.path(), "cat.png", "image/png", PNG),
        )]),
    );
    assert_eq!(one.len(), 3);
    assert_eq!(one[0], json!({"type": "text", "text": HEADER_TEXT}));
    assert_eq!(
        one[1],
        json!({"type": "text", "text": "\n- **/path/to/cat.png** (image/png)"})
    );
    assert_eq!(one[2]["type"], "image_url");
    let url = one[2]["image_url"]["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/png;base64,"));
    assert_eq!(b64_of(url), "iVBORw0KGgoAAAANSUhEUg==");

    let several = image_blocks_at(
        dir.path(),
        &map(&[
            (
                "/a.png",
                viewed(
                    dir.path(),
                    "a.png",
                    "image/png",
                    b"\x89PNG\r\n\x1a\nfake-png",
                ),
            ),
            (
                "/b.jpg",
                viewed(
                    dir.path(),
                    "b.jpg",
                    "image/jpeg",
                    b"\xff\xd8\xff\xe0fake-jpeg",
                ),
            ),
        ]),
    );
    assert_eq!(several.len(), 5);
    let urls: Vec<&str> = several
        .iter()
        .filter(|b| b["type"] == "image_url")
        .map(|b| b["image_url"]["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls.len(), 2);
    assert!(urls[0].starts_with("data:image/png;base64,"));
    assert!(urls[1].starts_with("data:image/jpeg;base64,"));
}

#[test]
fn the_image_block_is_omitted_when_the_file_is_unusable() {
    let dir = scratch();
    let no_image = |blocks: &[Value]| blocks.iter().all(|b| b["type"] != "image_url");
    let unavailable = |blocks: &[Value]| {
        blocks
            .iter()
            .filter(|b| {
                b["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("file unavailable or changed on disk"))
            })
            .count()
    };
    // Missing.
    let missing = dir.path().join("nonexistent.png");
    let blocks = image_blocks_at(
        dir.path(),
        &map(&[(
            "/broken.png",
            json!({"mime_type": "image/png", "size": 0, "actual_path": missing}),
        )]),
    );
    assert_eq!(blocks.len(), 3);
    assert!(no_image(&blocks));
    assert_eq!(
        blocks[2]["text"],
        format!(
            "  (file unavailable or changed on disk: {})",
            missing.display()
        )
    );
    // Resized since it was viewed.
    let entry = viewed(
        dir.path(),
        "shrinking.png",
        "image/png",
        b"original-larger-content",
    );
    std::fs::write(
        dir.path().join("shrinking.png"),
        b"much-much-much-larger-content-bytes",
    )
    .unwrap();
    let blocks = image_blocks_at(dir.path(), &map(&[("/shrinking.png", entry)]));
    assert!(no_image(&blocks));
    assert_eq!(unavailable(&blocks), 1);
    // Grown past the 20 MiB cap (recorded size matches, so only the cap stops it).
    let big = vec![b'y'; 21 * 1024 * 1024];
    let entry = viewed(dir.path(), "huge.png", "image/png", &big);
    let blocks = image_blocks_at(dir.path(), &map(&[("/huge.png", entry)]));
    assert!(no_image(&blocks));
    // Not a regular file (unreadable as an image).
    std::fs::create_dir(dir.path().join("dir.png")).unwrap();
    let blocks = image_blocks_at(
        dir.path(),
        &map(&[(
            "/dir.png",
            json!({"mime_type": "image/png", "size": 0, "actual_path": dir.path().join("dir.png")}),
        )]),
    );
    assert!(no_image(&blocks));
    assert_eq!(unavailable(&blocks), 1);
}

#[test]
fn unknown_mime_when_missing() {
    let dir = scratch();
    let mut entry = viewed(dir.path(), "mystery.bin", "x", PNG);
    entry.as_object_mut().unwrap().remove("mime_type");
    let blocks = image_blocks_at(dir.path(), &map(&[("/mystery.bin", entry)]));
    let described: Vec<&Value> = blocks
        .iter()
        .filter(|b| {
            b["text"]
                .as_str()
                .is_some_and(|t| t.contains("/mystery.bin"))
        })
        .collect();
    assert_eq!(described.len(), 1);
    assert!(described[0]["text"].as_str().unwrap().contains("(unknown)"));
}

#[tokio::test]
async fn before_model_injects_a_hidden_marked_message() {
    let home = scratch();
    let mw = ViewImageMiddleware::new(home.path());
    let run = run_ctx("t", "r");
    let none = mw
        .before_model(&state(vec![Message::human("hi")]), &run)
        .await
        .unwrap();
    assert_eq!(none.update, None);

    let s = one_viewed_image(home.path());
    let msgs = update_messages(&mw.before_model(&s, &run).await.unwrap().update);
    assert_eq!(msgs.len(), 1);
    let Message::Human(h) = &msgs[0] else {
        panic!("expected a human message, got {:?}", msgs[0]);
    };
    let Content::Blocks(blocks) = &h.content else {
        panic!("expected content blocks");
    };
    assert!(blocks.iter().any(|b| b["type"] == "image_url"));
    assert_eq!(h.additional_kwargs["hide_from_ui"], true);
    assert_eq!(h.additional_kwargs[CONTEXT_MARKER_KEY], true);
    let id = h.id.as_deref().unwrap();
    let hex = id.strip_prefix(CONTEXT_ID_PREFIX).unwrap();
    assert_eq!(hex.len(), 32);
    assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(is_image_context(&msgs[0]));
}

#[tokio::test]
async fn a_cleared_viewed_images_map_injects_the_placeholder() {
    // The reducer's `{}` rule clears every entry; a later completed view_image turn then says
    // nothing was viewed instead of failing.
    let home = scratch();
    let mut s = one_viewed_image(home.path());
    s.apply(StateUpdate {
        viewed_images: Some(Map::new()),
        ..Default::default()
    })
    .unwrap();
    assert!(s.viewed_images.is_empty());
    let msgs = injected_under(home.path(), &s).await;
    assert_eq!(
        msgs[0].content(),
        &Content::Blocks(vec![json!({"type": "text", "text": NO_IMAGES_TEXT})])
    );
}

#[tokio::test]
async fn after_model_removes_only_marked_messages() {
    let home = scratch();
    let mw = ViewImageMiddleware::new(home.path());
    let run = run_ctx("t", "r");
    let mut s = one_viewed_image(home.path());
    let injected = mw.before_model(&s, &run).await.unwrap().update.unwrap();
    let injected_id = update_messages(&Some(injected.clone()))[0]
        .id()
        .unwrap()
        .to_owned();
    s.apply(injected).unwrap();
    s.apply(StateUpdate::message(Message::ai("I can see the image.")))
        .unwrap();

    let removal = mw.after_model(&s, &run).await.unwrap().update.unwrap();
    let msgs = update_messages(&Some(removal.clone()));
    assert_eq!(msgs, vec![Message::remove(injected_id.clone())]);
    s.apply(removal).unwrap();
    assert!(s.messages.by_id(&injected_id).is_none());
    assert_eq!(s.messages.last().unwrap().text(), "I can see the image.");

    // A client message that reuses the prefix without the marker stays.
    let client = hidden(HumanMessage {
        content: "Here are the images you've viewed: user-authored text".into(),
        id: Some("view-image-context:client-supplied".into()),
        ..Default::default()
    });
    let s = state(vec![Message::Human(client), Message::ai("response")]);
    assert_eq!(mw.after_model(&s, &run).await.unwrap().update, None);
}

/// `viewed_images` is state: an entry naming a file outside the run's own thread folders
/// (another user's thread, an arbitrary host file, a symlink out) is reported, never read.
#[tokio::test]
async fn images_outside_the_runs_thread_folders_are_never_read() {
    let home = scratch();
    let mine = uploads_of(home.path(), "t");
    let theirs = uploads_of(&home.path().join("users/alice"), "t");
    let outside = scratch();
    let out = viewed(outside.path(), "out.png", "image/png", PNG);
    std::os::unix::fs::symlink(outside.path().join("out.png"), mine.join("link.png")).unwrap();
    let link =
        json!({"mime_type": "image/png", "size": PNG.len(), "actual_path": mine.join("link.png")});
    let s = completed_state(map(&[
        (
            "/mnt/user-data/uploads/mine.png",
            viewed(&mine, "mine.png", "image/png", PNG),
        ),
        (
            "/mnt/user-data/uploads/theirs.png",
            viewed(&theirs, "theirs.png", "image/png", PNG),
        ),
        ("/mnt/user-data/uploads/out.png", out),
        ("/mnt/user-data/uploads/link.png", link),
    ]));
    let msgs = injected_under(home.path(), &s).await;
    let Content::Blocks(blocks) = msgs[0].content() else {
        panic!("expected blocks");
    };
    let images = blocks.iter().filter(|b| b["type"] == "image_url").count();
    assert_eq!(images, 1, "{blocks:?}");
    let unavailable = blocks
        .iter()
        .filter(|b| {
            b["text"]
                .as_str()
                .is_some_and(|t| t.contains("file unavailable or changed on disk"))
        })
        .count();
    assert_eq!(unavailable, 3, "{blocks:?}");
}

/// Lead agent whose model views an image, then calls another tool, then answers.
#[tokio::test]
async fn the_image_reaches_the_next_request_once_and_is_never_persisted() {
    let home = scratch();
    let host = uploads_of(home.path(), "thread-img").join("img.png");
    std::fs::write(&host, PNG).unwrap();
    let cp: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
    let lead = Arc::new(ScriptedModel::new([
        ScriptedReply::tool_call(
            "v1",
            "view_image",
            json!({"image_path": "/mnt/user-data/uploads/img.png"}),
        ),
        ScriptedReply::tool_call("l1", "ls", json!({"path": "/mnt/user-data/workspace"})),
        ScriptedReply::text("It is a tiny PNG."),
    ]));
    let tools = ToolRegistry::new()
        .with(Arc::new(FakeViewImage {
            spec: spec("view_image"),
            host_path: PathBuf::from(&host),
        }))
        .with(EchoTool::new("ls"));
    let agent = Agent::new(lead.clone())
        .with_tools(tools)
        .with_chain(Chain::new(vec![Arc::new(ViewImageMiddleware::new(home.path()))]).unwrap())
        .with_checkpointer(cp.clone());
    let run = Arc::new(run_ctx("thread-img", "run-1"));
    let out = run_ok(&agent, "look at my upload", run).await;

    let reqs = lead.requests();
    assert_eq!(reqs.len(), 3);
    let contexts = |i: usize| -> Vec<Message> {
        reqs[i]
            .messages
            .iter()
            .filter(|m| is_image_context(m))
            .cloned()
            .collect()
    };
    assert!(contexts(0).is_empty());
    assert!(contexts(2).is_empty(), "the image is sent once");
    let second = contexts(1);
    assert_eq!(second.len(), 1);
    // Right after the tool message answering the view_image call.
    let last = reqs[1].messages.last().unwrap();
    assert!(is_image_context(last));
    assert!(
        matches!(&reqs[1].messages[reqs[1].messages.len() - 2], Message::Tool(t) if t.tool_call_id == "v1")
    );
    let Content::Blocks(blocks) = second[0].content() else {
        panic!("expected blocks");
    };
    let urls: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "image_url")
        .map(|b| b["image_url"]["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls, ["data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="]);

    // Neither the final state nor the latest checkpoint keeps the image message.
    assert!(out.state.messages.iter().all(|m| !is_image_context(m)));
    assert!(!serde_json::to_string(&out.state)
        .unwrap()
        .contains("base64"));
    let stored = cp.latest("thread-img").await.unwrap().unwrap();
    assert!(stored.state.messages.iter().all(|m| !is_image_context(m)));
    // Only metadata stays in state.
    assert_eq!(
        out.state.viewed_images["/mnt/user-data/uploads/img.png"]["size"],
        json!(PNG.len())
    );
}
