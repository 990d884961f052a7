#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use antler_runtime::{HookSet, Middleware};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

struct Named(&'static str, HookSet);

#[async_trait::async_trait]
impl Middleware for Named {
    fn name(&self) -> &str {
        self.0
    }
    fn hooks(&self) -> HookSet {
        self.1
    }
}

fn mw(name: &'static str) -> Arc<dyn Middleware> {
    Arc::new(Named(name, HookSet::WRAP_TOOL))
}

/// A chain with these slots, each middleware named after its slot.
fn chain(slots: &[&'static str]) -> Vec<ChainEntry> {
    slots
        .iter()
        .map(|s| ChainEntry {
            slot: s,
            middleware: mw(s),
        })
        .collect()
}

fn shown(entries: &[ChainEntry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| format!("{} {}", e.slot, e.middleware.name()))
        .collect()
}

const LEAD: &[&str] = &["S1", "S8", "S14", "L1", "L4", "L15", "L19", "L21", "L22"];

fn ext(p: Placement, name: &'static str) -> Extension {
    Extension::new(p, mw(name))
}

#[test]
fn extensions_go_at_their_anchors_in_registration_order() {
    let exts = [
        ext(Placement::Default, "A"),
        ext(Placement::after("L15"), "B"),
        ext(Placement::Default, "C"),
        ext(Placement::before("S8"), "D"),
        // Anchored on an extension registered earlier.
        ext(Placement::after("B"), "E"),
    ];
    let out = apply(chain(LEAD), &exts, Segment::Lead).unwrap();
    assert_eq!(
        shown(&out),
        [
            "S1 S1", "ext D", "S8 S8", "S14 S14", "L1 L1", "L4 L4", "L15 L15", "ext B", "ext E",
            "L17 A", "L17 C", "L19 L19", "L21 L21", "L22 L22",
        ]
    );
}

#[test]
fn a_slot_missing_from_this_chain_anchors_where_it_would_be() {
    // L6 (Todo) is off outside plan mode: before/after it means between L4 and L15.
    let exts = [
        ext(Placement::after("L6"), "A"),
        ext(Placement::before("L6"), "B"),
    ];
    let out = apply(chain(LEAD), &exts, Segment::Lead).unwrap();
    let names: Vec<String> = shown(&out);
    assert_eq!(names[4..8], ["L4 L4", "ext A", "ext B", "L15 L15"]);
    // Subagents: the default slot is before U9, or where U9 would be.
    let sub = chain(&["S1", "S14", "U6", "U10", "U13"]);
    let exts = [ext(Placement::Default, "A").only_in_subagents()];
    assert_eq!(
        shown(&apply(sub, &exts, Segment::Subagent).unwrap()),
        ["S1 S1", "S14 S14", "U6 U6", "U8 A", "U10 U10", "U13 U13"]
    );
}

#[test]
fn unknown_anchors_are_refused_at_registration_naming_them() {
    let err = validate(&ext(Placement::after("L99"), "A"), &[]).unwrap_err();
    assert!(matches!(&err, ExtensionError::UnknownSlot { anchor, .. } if anchor == "L99"));
    assert!(err.to_string().contains("'L99'"), "{err}");
    // A lead slot does not exist in subagents' chains.
    let err = validate(&ext(Placement::after("L15"), "A").in_subagents(), &[]).unwrap_err();
    assert!(err.to_string().contains("subagent"), "{err}");
    assert!(validate(&ext(Placement::after("U6"), "A").only_in_subagents(), &[]).is_ok());
    // An extension name works once registered, for the chains it is in.
    let b = ext(Placement::Default, "B");
    assert!(validate(&ext(Placement::after("B"), "C"), std::slice::from_ref(&b)).is_ok());
    assert!(validate(
        &ext(Placement::after("B"), "C").in_subagents(),
        std::slice::from_ref(&b)
    )
    .is_err());
    assert_eq!(
        validate(&ext(Placement::Default, "B"), &[b]),
        Err(ExtensionError::DuplicateName("B".into()))
    );
}

#[test]
fn order_rules_are_enforced_naming_the_extension() {
    let err = validate(&ext(Placement::after("L22"), "Late"), &[]).unwrap_err();
    assert!(
        err.to_string().contains("'Late'") && err.to_string().contains("last"),
        "{err}"
    );
    // A model wrapper outside InputSanitization.
    let wrapper = Extension::new(
        Placement::before("S1"),
        Arc::new(Named("Outer", HookSet::WRAP_MODEL)),
    );
    let err = apply(chain(LEAD), &[wrapper], Segment::Lead).err().unwrap();
    assert!(err.to_string().contains("outermost model wrapper"), "{err}");
    // A tool wrapper there is fine (DeerFlow's TOOL_VISIBLE placement).
    assert!(apply(
        chain(LEAD),
        &[ext(Placement::before("S1"), "Tools")],
        Segment::Lead
    )
    .is_ok());
    // SkillActivation → SkillToolPolicy → DurableContext stay adjacent.
    let skills = chain(&["S1", "L1", "L2", "L3", "L4", "L22"]);
    for p in [Placement::after("L2"), Placement::before("L4")] {
        let err = apply(skills.clone(), &[ext(p, "Between")], Segment::Lead)
            .err()
            .unwrap();
        assert!(matches!(err, ExtensionError::Ordering { .. }), "{err}");
    }
    assert!(apply(
        skills,
        &[ext(Placement::after("L4"), "After")],
        Segment::Lead
    )
    .is_ok());
    // A name already used by a built-in.
    assert_eq!(
        apply(
            chain(LEAD),
            &[ext(Placement::Default, "L15")],
            Segment::Lead
        )
        .err()
        .unwrap(),
        ExtensionError::DuplicateName("L15".into())
    );
}

#[test]
fn python_middlewares_are_listed_from_config_yaml_or_the_json_file() {
    let (_dir, file) = crate::test_fixtures::extensions_config(
        &json!({"mcpServers": {}, "middlewares": ["pkg.audit:AuditMiddleware"]}).to_string(),
    );
    let from_file = configured_python_middlewares(None, Some(&file));
    assert_eq!(from_file.len(), 1);
    assert_eq!(from_file[0].class_path, "pkg.audit:AuditMiddleware");
    assert!(from_file[0].to_string().contains("App::with_middleware"));
    // config.yaml's extensions.middlewares overrides the file's, even when empty.
    let yaml = json!({"middlewares": ["a.b:C", "d.e:F"]});
    let from_yaml = configured_python_middlewares(Some(&yaml), Some(&file));
    assert_eq!(
        from_yaml
            .iter()
            .map(|s| s.class_path.as_str())
            .collect::<Vec<_>>(),
        ["a.b:C", "d.e:F"]
    );
    assert!(from_yaml[0].source.contains("config.yaml"));
    assert!(
        configured_python_middlewares(Some(&json!({"middlewares": []})), Some(&file)).is_empty()
    );
    assert!(configured_python_middlewares(None, None).is_empty());
}

#[test]
fn deerflows_semantic_placements_resolve_per_chain() {
    let exts = [
        ext(Placement::Semantic(Semantic::ToolVisible), "Visible"),
        ext(Placement::Semantic(Semantic::ModelLogical), "Logical"),
        ext(Placement::Semantic(Semantic::ModelPhysical), "Physical"),
        ext(Placement::Semantic(Semantic::ToolRaw), "Raw"),
    ];
    let out = apply(chain(LEAD), &exts, Segment::Lead).unwrap();
    assert_eq!(
        shown(&out),
        [
            "ext Visible",
            "S1 S1",
            "ext Logical",
            "S8 S8",
            "S14 S14",
            "L1 L1",
            "L4 L4",
            "L15 L15",
            "L19 L19",
            "L21 L21",
            "ext Physical",
            "ext Raw",
            "L22 L22",
        ]
    );
    // Subagents: the physical and raw positions are inside SystemMessageCoalescing (U13).
    let sub = chain(&["S1", "S8", "S14", "U10", "U13"]);
    let exts = [
        ext(Placement::Semantic(Semantic::ModelPhysical), "Physical").only_in_subagents(),
        ext(Placement::Semantic(Semantic::Standard), "Standard").only_in_subagents(),
    ];
    assert_eq!(
        shown(&apply(sub, &exts, Segment::Subagent).unwrap()),
        [
            "S1 S1",
            "ext Standard",
            "S8 S8",
            "S14 S14",
            "U10 U10",
            "U13 U13",
            "ext Physical"
        ]
    );
}
