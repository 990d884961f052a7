use super::*;
use crate::messages::{Message, ToolMessage};
use crate::Change;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::json;

fn human(id: &str, text: &str) -> Message {
    let mut m = Message::human(text);
    m.set_id(id);
    m
}

/// A state holding `messages`, written as one update.
fn state_of(messages: Vec<Message>) -> ThreadState {
    let mut s = ThreadState::default();
    s.apply(StateUpdate::messages(messages)).unwrap();
    s
}

/// An update writing only `sandbox`.
fn sandbox_update(sandbox: Option<Option<SandboxState>>) -> StateUpdate {
    StateUpdate {
        sandbox,
        ..Default::default()
    }
}

/// An update writing only `todos`.
fn todos_update(todos: Option<Option<Vec<Todo>>>) -> StateUpdate {
    StateUpdate {
        todos,
        ..Default::default()
    }
}

fn ids(state: &ThreadState) -> Vec<String> {
    state
        .messages
        .iter()
        .map(|m| m.id().unwrap().to_owned())
        .collect()
}

#[test]
fn add_messages_appends_replaces_and_removes() {
    let mut s = state_of(vec![human("a", "1"), human("b", "2"), human("c", "3")]);
    s.apply(StateUpdate::messages(vec![
        human("b", "2'"),
        human("d", "4"),
    ]))
    .unwrap();
    assert_eq!(ids(&s), ["a", "b", "c", "d"]);
    assert_eq!(s.messages.by_id("b").unwrap().text(), "2'");
    s.apply(StateUpdate::messages(vec![
        Message::remove("a"),
        Message::remove("c"),
    ]))
    .unwrap();
    assert_eq!(ids(&s), ["b", "d"]);
}

#[test]
fn add_messages_assigns_ids() {
    let mut s = ThreadState::default();
    s.apply(StateUpdate::message(Message::human("x"))).unwrap();
    let id = s.messages.get(0).unwrap().id().unwrap();
    assert_eq!(uuid::Uuid::parse_str(id).unwrap().get_version_num(), 4);
}

#[test]
fn remove_unknown_id_is_an_error_and_changes_nothing() {
    let mut s = state_of(vec![human("a", "1")]);
    let err = s
        .apply(StateUpdate::messages(vec![
            human("b", "2"),
            Message::remove("zzz"),
        ]))
        .unwrap_err();
    assert!(err.to_string().contains("doesn't exist"));
    assert_eq!(ids(&s), ["a"]);
}

#[test]
fn readd_after_remove_in_same_write_cancels_removal() {
    let mut s = state_of(vec![human("a", "1"), human("b", "2")]);
    s.apply(StateUpdate::messages(vec![
        Message::remove("a"),
        human("a", "1'"),
    ]))
    .unwrap();
    assert_eq!(ids(&s), ["a", "b"]);
    assert_eq!(s.messages.get(0).unwrap().text(), "1'");
}

#[test]
fn remove_all_keeps_only_the_tail_without_dedup() {
    let mut s = state_of(vec![human("a", "1"), human("b", "2")]);
    s.apply(StateUpdate::messages(vec![
        human("x", "dropped"),
        Message::remove_all(),
        human("s", "summary"),
        human("b", "kept"),
        human("b", "dup"),
    ]))
    .unwrap();
    assert_eq!(ids(&s), ["s", "b", "b"]);
}

#[test]
fn change_log_records_upserts_removes_and_clear() {
    let mut s = state_of(vec![human("a", "1"), human("b", "2")]);
    let first = s.messages.take_changes();
    assert_eq!(first.len(), 2);
    s.apply(StateUpdate::messages(vec![
        human("a", "1'"),
        Message::remove("b"),
    ]))
    .unwrap();
    let changes = s.messages.take_changes();
    assert!(matches!(&changes[0], Change::Upsert { ord: 0, .. }));
    assert!(matches!(&changes[1], Change::Remove { ord: 1 }));
    s.apply(StateUpdate::messages(vec![
        Message::remove_all(),
        human("z", "z"),
    ]))
    .unwrap();
    let changes = s.messages.take_changes();
    assert_eq!(changes[0], Change::Clear);
    assert!(matches!(&changes[1], Change::Upsert { ord: 2, .. }));
}

#[test]
fn sandbox_reducer_is_idempotent_and_fail_closed() {
    let mut s = ThreadState::default();
    let sb = |id: &str| {
        Some(Some(SandboxState {
            sandbox_id: Some(id.into()),
        }))
    };
    s.apply(sandbox_update(sb("local"))).unwrap();
    s.apply(sandbox_update(sb("local"))).unwrap();
    s.apply(sandbox_update(Some(None))).unwrap();
    assert_eq!(
        s.sandbox.as_ref().unwrap().sandbox_id.as_deref(),
        Some("local")
    );
    let err = s.apply(sandbox_update(sb("other"))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Conflicting sandbox state updates: local != other"
    );
}

#[test]
fn failed_sandbox_write_applies_nothing_else() {
    let mut s = ThreadState {
        sandbox: Some(SandboxState {
            sandbox_id: Some("a".into()),
        }),
        ..Default::default()
    };
    let err = s.apply(StateUpdate {
        messages: Some(vec![human("m", "x")]),
        title: Some(Some("t".into())),
        sandbox: Some(Some(SandboxState {
            sandbox_id: Some("b".into()),
        })),
        ..Default::default()
    });
    assert!(err.is_err());
    assert!(s.messages.is_empty());
    assert_eq!(s.title, None);
}

#[test]
fn todos_null_write_preserves_and_empty_clears() {
    let mut s = ThreadState::default();
    let todo = Todo {
        content: "x".into(),
        status: TodoStatus::Pending,
    };
    s.apply(todos_update(Some(Some(vec![todo.clone()]))))
        .unwrap();
    s.apply(todos_update(Some(None))).unwrap();
    assert_eq!(s.todos, Some(vec![todo]));
    s.apply(todos_update(Some(Some(vec![])))).unwrap();
    assert_eq!(s.todos, Some(vec![]));
}

#[test]
fn last_value_keys_accept_explicit_null() {
    let mut s = ThreadState {
        title: Some("t".into()),
        ..Default::default()
    };
    s.apply(StateUpdate {
        title: Some(None),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.title, None);
}

#[test]
fn state_json_matches_contract_shape() {
    let mut s = ThreadState::default();
    let mut t = ToolMessage::new("c1", "ok");
    t.id = Some("t".into());
    s.apply(StateUpdate::messages(vec![human("h", "hi"), t.into()]))
        .unwrap();
    let v = serde_json::to_value(&s).unwrap();
    for key in [
        "messages",
        "title",
        "artifacts",
        "todos",
        "uploaded_files",
        "viewed_images",
        "thread_data",
        "sandbox",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["messages"][1]["type"], "tool");
    assert!(v.get("summary_text").is_none());
    let back: ThreadState = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
}

#[test]
fn update_json_distinguishes_absent_and_null() {
    let u: StateUpdate = serde_json::from_value(json!({"title": null, "custom_key": 3})).unwrap();
    assert_eq!(u.title, Some(None));
    assert_eq!(u.todos, None);
    assert_eq!(u.extensions["custom_key"], 3);
    let v = serde_json::to_value(&u).unwrap();
    assert_eq!(v, json!({"title": null, "custom_key": 3}));
}

// ---- add_messages against a direct transcription of the LangGraph algorithm ----

#[derive(Clone, Debug)]
enum Op {
    Add(u8, u8),
    Remove(u8),
    RemoveAll,
}

fn reference(left: &[(String, String)], right: &[Op]) -> Option<Vec<(String, String)>> {
    let right: Vec<(bool, Option<String>, String)> = right
        .iter()
        .map(|op| match op {
            Op::Add(id, v) => (false, Some(format!("m{id}")), format!("v{v}")),
            Op::Remove(id) => (true, Some(format!("m{id}")), String::new()),
            Op::RemoveAll => (true, Some(REMOVE_ALL.into()), String::new()),
        })
        .collect();
    const REMOVE_ALL: &str = crate::REMOVE_ALL_MESSAGES;
    if let Some(pos) = right
        .iter()
        .rposition(|(rm, id, _)| *rm && id.as_deref() == Some(REMOVE_ALL))
    {
        return Some(
            right[pos + 1..]
                .iter()
                .filter(|(rm, _, _)| !rm)
                .map(|(_, id, v)| (id.clone().unwrap(), v.clone()))
                .collect(),
        );
    }
    let mut merged: Vec<(String, String)> = left.to_vec();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    for (i, (id, _)) in merged.iter().enumerate() {
        index.insert(id.clone(), i);
    }
    let mut to_remove: std::collections::HashSet<String> = Default::default();
    for (rm, id, v) in right {
        let id = id.unwrap();
        match (index.get(&id).copied(), rm) {
            (Some(_), true) => {
                to_remove.insert(id);
            }
            (Some(i), false) => {
                to_remove.remove(&id);
                merged[i] = (id, v);
            }
            (None, true) => return None,
            (None, false) => {
                index.insert(id.clone(), merged.len());
                merged.push((id, v));
            }
        }
    }
    Some(
        merged
            .into_iter()
            .filter(|(id, _)| !to_remove.contains(id))
            .collect(),
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..12, 0u8..4).prop_map(|(a, b)| Op::Add(a, b)),
        2 => (0u8..12).prop_map(Op::Remove),
        1 => Just(Op::RemoveAll),
    ]
}

fn to_messages(ops: &[Op]) -> Vec<Message> {
    ops.iter()
        .map(|op| match op {
            Op::Add(id, v) => human(&format!("m{id}"), &format!("v{v}")),
            Op::Remove(id) => Message::remove(format!("m{id}")),
            Op::RemoveAll => Message::remove_all(),
        })
        .collect()
}

fn snapshot(s: &ThreadState) -> Vec<(String, String)> {
    s.messages
        .iter()
        .map(|m| (m.id().unwrap().to_owned(), m.text()))
        .collect()
}

proptest! {
    #[test]
    fn add_messages_matches_langgraph(writes in prop::collection::vec(prop::collection::vec(op(), 0..6), 1..8)) {
        let mut s = ThreadState::default();
        let mut model: Vec<(String, String)> = vec![];
        for w in &writes {
            let expected = reference(&model, w);
            let got = s.apply(StateUpdate::messages(to_messages(w)));
            match expected {
                None => { prop_assert!(got.is_err()); prop_assert_eq!(snapshot(&s), model.clone()); }
                Some(e) => { prop_assert!(got.is_ok()); prop_assert_eq!(snapshot(&s), e.clone()); model = e; }
            }
            // The id index always agrees with a linear scan (last occurrence wins).
            for (i, (id, _)) in model.iter().enumerate() {
                let last = model.iter().rposition(|(x, _)| x == id).unwrap();
                if last == i { prop_assert_eq!(s.messages.position(id), Some(i)); }
            }
        }
    }

    #[test]
    fn change_log_replays_to_the_same_list(writes in prop::collection::vec(prop::collection::vec(op(), 0..6), 1..8)) {
        // A store that replays only the change log reconstructs the list exactly.
        let mut s = ThreadState::default();
        let mut rows: std::collections::BTreeMap<u64, Message> = Default::default();
        for w in &writes {
            let _ = s.apply(StateUpdate::messages(to_messages(w)));
            for c in s.messages.take_changes() {
                match c {
                    Change::Upsert { ord, message, .. } => { rows.insert(ord, (*message).clone()); }
                    Change::Remove { ord } => { rows.remove(&ord); }
                    Change::Clear => rows.clear(),
                }
            }
            let replayed: Vec<Message> = rows.values().cloned().collect();
            prop_assert_eq!(replayed, s.messages.to_vec());
        }
    }

    #[test]
    fn appending_is_idempotent_once_ids_exist(vals in prop::collection::vec((0u8..12, 0u8..4), 0..10)) {
        let w: Vec<Op> = vals.iter().map(|&(a, b)| Op::Add(a, b)).collect();
        let mut s = ThreadState::default();
        s.apply(StateUpdate::messages(to_messages(&w))).unwrap();
        let once = snapshot(&s);
        s.apply(StateUpdate::messages(to_messages(&w))).unwrap();
        prop_assert_eq!(snapshot(&s), once);
    }
}

#[test]
fn a_list_snapshot_reads_like_the_list_and_stays_as_it_was() {
    let mut live = state_of(vec![
        human("a", "one"),
        human("b", "two"),
        human("c", "three"),
    ]);
    live.messages.take_changes();
    // The read-only list a retained `values` snapshot is shown through.
    let snap = Messages::from_shared(live.messages.arcs().cloned().collect());
    // Same JSON, same lookups, no change log of its own.
    assert_eq!(
        serde_json::to_value(&snap).unwrap(),
        serde_json::to_value(&live.messages).unwrap()
    );
    assert_eq!(snap.position("c"), Some(2));
    assert_eq!(snap.by_id("b").map(Message::text), Some("two".into()));
    assert_eq!(snap.position("zzz"), None);
    assert_eq!(snap.ords(), live.messages.ords());
    assert!(snap.pending_changes().is_empty());
    // The live state moves on; the snapshot does not.
    live.apply(StateUpdate::messages(vec![human("d", "four")]))
        .unwrap();
    live.apply(StateUpdate::messages(vec![human("b", "TWO")]))
        .unwrap();
    let snap_ids: Vec<_> = snap.iter().filter_map(Message::id).collect();
    assert_eq!(snap_ids, ["a", "b", "c"]);
    assert_eq!(snap.by_id("b").map(Message::text), Some("two".into()));
    assert_eq!(
        live.messages.by_id("b").map(Message::text),
        Some("TWO".into())
    );
    // A write to a snapshot rebuilds its index first: a known id still replaces in place.
    let mut copy = ThreadState {
        messages: snap.clone(),
        ..ThreadState::default()
    };
    copy.apply(StateUpdate::messages(vec![human("b", "2")]))
        .unwrap();
    assert_eq!(ids(&copy), ["a", "b", "c"]);
    assert_eq!(
        copy.messages.by_id("b").map(Message::text),
        Some("2".into())
    );
}

/// A `values` snapshot writes the same JSON, byte for byte and key for key, as the state it was
/// taken of — whichever channels are set — and keeps showing that state after the live one moves.
#[test]
fn a_state_snapshot_serializes_as_its_state_and_stays_as_it_was() {
    let mut live = state_of(vec![human("a", "one"), human("b", "two")]);
    let check = |live: &ThreadState| {
        let snap = live.snapshot();
        assert_eq!(
            serde_json::to_string(&snap).unwrap(),
            serde_json::to_string(live).unwrap()
        );
        assert_eq!(&snap.to_state(), live);
        assert_eq!(snap.generation, live.messages.generation());
        snap
    };
    let bare = check(&live);
    live.title = Some("t".into());
    live.todos = Some(vec![Todo {
        content: "x".into(),
        status: TodoStatus::InProgress,
    }]);
    live.goal = Some(json!({"objective": "g"}));
    live.summary_text = Some("s".into());
    live.extensions.insert("custom_key".into(), json!([1, 2]));
    check(&live);
    let taken = StateSnapshot::from_state(live.clone());
    assert_eq!(taken.to_state(), live);
    assert!(taken.fields.messages.is_empty(), "the channels alone");
    live.apply(StateUpdate::messages(vec![human("c", "three")]))
        .unwrap();
    assert_eq!(bare.messages.len(), 2);
    assert_eq!(bare.to_state().title, None);
}

/// A list's generation moves exactly when a message already in it is replaced or removed, so a
/// later state with the same generation is the earlier one plus appends (what the server's
/// replay buffer relies on to keep only new messages per `values` snapshot).
#[test]
fn generation_moves_on_replacement_and_removal_only() {
    let mut list = Messages::new();
    list.push(human("a", "one"));
    list.push(human("b", "two"));
    let g = list.generation();
    list.push(human("c", "three"));
    assert_eq!(list.generation(), g, "an append");
    assert_eq!(
        StateSnapshot::new(Arc::default(), &list).generation,
        g,
        "a snapshot keeps it"
    );
    list.push(human("b", "two, edited"));
    let replaced = list.generation();
    assert_ne!(replaced, g, "a replacement by id");
    list.add(vec![Message::remove("a")]).unwrap();
    let removed = list.generation();
    assert_ne!(removed, replaced, "a removal");
    list.add(vec![Message::remove_all(), human("d", "four")])
        .unwrap();
    assert_ne!(list.generation(), removed, "remove-all");
}

#[test]
fn same_fields_follows_every_non_message_channel_and_ignores_messages() {
    let mut state = ThreadState::default();
    let mut last = state.fields_only();
    assert!(last.messages.is_empty());
    assert!(state.same_fields(&last));
    state.messages.add(vec![human("a", "one")]).unwrap();
    assert!(state.same_fields(&last), "messages are not a field");
    let changes: [fn(&mut ThreadState); 9] = [
        |s| s.title = Some("a \"title\"".into()),
        |s| s.artifacts.push("/mnt/user-data/outputs/a.md".into()),
        |s| s.todos = Some(vec![]),
        |s| s.goal = Some(json!({"text": "g"})),
        |s| s.uploaded_files = Some(vec![json!("f")]),
        |s| {
            s.viewed_images.insert("p".into(), json!({}));
        },
        |s| s.summary_text = Some("sum".into()),
        |s| s.background_tasks = Some(vec![]),
        |s| {
            s.extensions.insert("custom".into(), json!({"k": [1, 2]}));
        },
    ];
    for (i, change) in changes.iter().enumerate() {
        change(&mut state);
        assert!(!state.same_fields(&last), "change {i} went unnoticed");
        last = state.fields_only();
        assert!(state.same_fields(&last), "change {i}");
        // What the loop stores for a changed state is what the snapshot would store.
        assert_eq!(last.fields_value(), state.fields_value(), "change {i}");
    }
}

/// `only_messages` is what lets the loop skip comparing channels after a write: any update that
/// sets another channel (even to `None`) must say so.
#[test]
fn only_messages_is_false_for_a_write_to_any_other_channel() {
    assert!(StateUpdate::default().only_messages());
    assert!(StateUpdate::messages(vec![human("a", "one")]).only_messages());
    let writes: [fn(&mut StateUpdate); 15] = [
        |u| u.title = Some(None),
        |u| u.artifacts = Some(vec![]),
        |u| u.todos = Some(None),
        |u| u.goal = Some(None),
        |u| u.uploaded_files = Some(None),
        |u| u.viewed_images = Some(Map::new()),
        |u| u.thread_data = Some(None),
        |u| u.sandbox = Some(None),
        |u| u.summary_text = Some(None),
        |u| u.promoted = Some(Promoted::default()),
        |u| u.delegations = Some(vec![]),
        |u| u.skill_context = Some(vec![]),
        |u| u.background_tasks = Some(None),
        |u| {
            u.extensions.insert("custom".into(), json!(null));
        },
        |u| {
            u.messages = Some(vec![]);
            u.title = Some(Some("t".into()));
        },
    ];
    for (i, write) in writes.iter().enumerate() {
        let mut u = StateUpdate::default();
        write(&mut u);
        assert!(!u.only_messages(), "write {i}");
    }
}
