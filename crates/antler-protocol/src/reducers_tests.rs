use super::*;
use crate::state::{Delegation, Promoted, SkillEntry};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::json;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn artifacts_dedupe_in_order() {
    assert_eq!(
        merge_artifacts(Some(s(&["a", "b"])), Some(s(&["b", "c"]))),
        s(&["a", "b", "c"])
    );
    assert_eq!(merge_artifacts(None, Some(s(&["a"]))), s(&["a"]));
    assert_eq!(merge_artifacts(Some(s(&["a"])), None), s(&["a"]));
    assert_eq!(merge_artifacts(None, None), Vec::<String>::new());
}

#[test]
fn viewed_images_merge_and_clear() {
    let a = json!({"/a": {"mime_type": "image/png"}})
        .as_object()
        .unwrap()
        .clone();
    let b = json!({"/b": {"mime_type": "image/jpeg"}})
        .as_object()
        .unwrap()
        .clone();
    let merged = merge_viewed_images(Some(a.clone()), Some(b));
    assert_eq!(merged.len(), 2);
    assert!(merge_viewed_images(Some(merged), Some(Default::default())).is_empty());
    assert_eq!(merge_viewed_images(Some(a.clone()), None), a);
}

#[test]
fn promoted_union_under_same_hash_replace_otherwise() {
    let p = |h: Option<&str>, n: &[&str]| Promoted {
        catalog_hash: h.map(Into::into),
        names: s(n),
    };
    assert_eq!(
        merge_promoted(Some(p(Some("h"), &["a"])), None),
        Some(p(Some("h"), &["a"]))
    );
    assert_eq!(
        merge_promoted(Some(p(Some("h"), &["a"])), Some(Promoted::default())),
        Some(p(Some("h"), &["a"]))
    );
    assert_eq!(
        merge_promoted(None, Some(p(Some("h"), &["a", "a"]))),
        Some(p(Some("h"), &["a"]))
    );
    assert_eq!(
        merge_promoted(Some(p(Some("h"), &["a"])), Some(p(Some("h"), &["b", "a"]))),
        Some(p(Some("h"), &["a", "b"]))
    );
    assert_eq!(
        merge_promoted(Some(p(Some("h"), &["a"])), Some(p(Some("g"), &["b"]))),
        Some(p(Some("g"), &["b"]))
    );
    assert_eq!(
        merge_promoted(Some(p(None, &["a"])), Some(p(Some("g"), &["b"]))),
        Some(p(Some("g"), &["b"]))
    );
    // A search with no matches is a no-op union under the same hash.
    assert_eq!(
        merge_promoted(Some(p(Some("h"), &["a"])), Some(p(Some("h"), &[]))),
        Some(p(Some("h"), &["a"]))
    );
}

fn d(id: &str, status: &str) -> Delegation {
    Delegation {
        id: id.into(),
        status: status.into(),
        ..Default::default()
    }
}

#[test]
fn delegations_ledger_rules() {
    assert_eq!(
        merge_delegations(Some(vec![d("a", "in_progress")]), None),
        vec![d("a", "in_progress")]
    );
    assert_eq!(
        merge_delegations(None, Some(vec![d("a", "in_progress")])),
        vec![d("a", "in_progress")]
    );
    // latest wins, order first-seen
    let out = merge_delegations(
        Some(vec![d("a", "in_progress"), d("b", "in_progress")]),
        Some(vec![d("a", "completed")]),
    );
    assert_eq!(
        out.iter()
            .map(|x| (x.id.as_str(), x.status.as_str()))
            .collect::<Vec<_>>(),
        [("a", "completed"), ("b", "in_progress")]
    );
    // terminal not downgraded, terminal -> terminal allowed
    let out = merge_delegations(
        Some(vec![d("a", "completed")]),
        Some(vec![d("a", "in_progress")]),
    );
    assert_eq!(out[0].status, "completed");
    let out = merge_delegations(
        Some(vec![d("a", "completed")]),
        Some(vec![d("a", "failed")]),
    );
    assert_eq!(out[0].status, "failed");
    // created_at and run_id inherited
    let mut first = d("a", "in_progress");
    first.created_at = Some("t0".into());
    first.run_id = Some("r".into());
    let mut second = d("a", "completed");
    second.created_at = Some("t1".into());
    let out = merge_delegations(Some(vec![first]), Some(vec![second]));
    assert_eq!(out[0].created_at.as_deref(), Some("t0"));
    assert_eq!(out[0].run_id.as_deref(), Some("r"));
    // cap keeps the most recent
    let many: Vec<Delegation> = (0..60).map(|i| d(&format!("x{i}"), "completed")).collect();
    let out = merge_delegations(None, Some(many));
    assert_eq!(out.len(), MAX_DELEGATIONS);
    assert_eq!(out[0].id, "x10");
}

#[test]
fn delegation_terminal_set_matches_contract() {
    for st in [
        "completed",
        "failed",
        "cancelled",
        "timed_out",
        "polling_timed_out",
    ] {
        assert!(d("a", st).is_terminal());
    }
    assert!(!d("a", "in_progress").is_terminal());
}

fn sk(path: &str, desc: &str) -> SkillEntry {
    SkillEntry {
        name: path.into(),
        path: path.into(),
        description: desc.into(),
        loaded_at: 0,
    }
}

#[test]
fn skill_context_recency_and_cap() {
    let existing: Vec<SkillEntry> = (0..8).map(|i| sk(&format!("/s{i}"), "d")).collect();
    // Re-reading /s0 refreshes its recency so /s1 is evicted instead.
    let out = merge_skill_context(Some(existing), Some(vec![sk("/s0", "d"), sk("/new", "d")]));
    let paths: Vec<&str> = out.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["/s2", "/s3", "/s4", "/s5", "/s6", "/s7", "/s0", "/new"]
    );
    // Normalization happens even with no new entries.
    let long = "word  ".repeat(200);
    let out = merge_skill_context(Some(vec![sk("/a", &long)]), None);
    assert!(out[0].description.chars().count() <= MAX_SKILL_DESCRIPTION);
    assert!(!out[0].description.contains("  "));
}

proptest! {
    #[test]
    fn artifacts_laws(a in prop::collection::vec("[a-e]", 0..8), b in prop::collection::vec("[a-e]", 0..8), c in prop::collection::vec("[a-e]", 0..8)) {
        let ab = merge_artifacts(Some(a.clone()), Some(b.clone()));
        // no duplicates, every input present, existing order is a prefix of the first occurrences
        let set: std::collections::HashSet<_> = ab.iter().collect();
        prop_assert_eq!(set.len(), ab.len());
        for x in a.iter().chain(&b) { prop_assert!(ab.contains(x)); }
        let mut a_dedup = a.clone(); let mut seen = std::collections::HashSet::new(); a_dedup.retain(|x| seen.insert(x.clone()));
        prop_assert_eq!(&ab[..a_dedup.len()], &a_dedup[..]);
        // associative and idempotent
        let left = merge_artifacts(Some(ab.clone()), Some(c.clone()));
        let right = merge_artifacts(Some(a.clone()), Some(merge_artifacts(Some(b.clone()), Some(c.clone()))));
        prop_assert_eq!(left, right);
        prop_assert_eq!(merge_artifacts(Some(ab.clone()), Some(ab.clone())), ab);
    }

    #[test]
    fn viewed_images_laws(a in prop::collection::btree_map("[a-d]", 0u8..5, 0..5), b in prop::collection::btree_map("[a-d]", 0u8..5, 0..5)) {
        let to_map = |m: &std::collections::BTreeMap<String, u8>| m.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>();
        let (ma, mb) = (to_map(&a), to_map(&b));
        let merged = merge_viewed_images(Some(ma.clone()), Some(mb.clone()));
        if mb.is_empty() {
            prop_assert!(merged.is_empty());
        } else {
            for (k, v) in &mb { prop_assert_eq!(merged.get(k), Some(v)); }
            for (k, v) in &ma { if !mb.contains_key(k) { prop_assert_eq!(merged.get(k), Some(v)); } }
            prop_assert_eq!(merged.len(), ma.keys().chain(mb.keys()).collect::<std::collections::HashSet<_>>().len());
        }
    }

    #[test]
    fn todos_law_null_never_wipes(a in prop::option::of(prop::collection::vec(0u8..3, 0..3))) {
        prop_assert_eq!(merge_todos(a.clone(), None), a);
    }
}
