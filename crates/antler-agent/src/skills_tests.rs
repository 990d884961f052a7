use super::*;
use pretty_assertions::assert_eq;

fn write(root: &Path, rel: &str, body: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

fn skill(name: &str, desc: &str) -> String {
    format!("---\nname: {name}\ndescription: {desc}\n---\n# Body\n")
}

#[test]
fn front_matter_fields_and_lenient_failures() {
    let fm = parse_skill_md("---\nname: \"pdf-tools\"\ndescription: >\n  Work with\n  PDF files\nlicense: MIT\nallowed-tools: [read_file, bash]\n---\nbody").unwrap();
    assert_eq!(fm.name, "pdf-tools");
    assert_eq!(fm.description, "Work with PDF files");
    assert_eq!(fm.license.as_deref(), Some("MIT"));
    assert_eq!(
        fm.allowed_tools,
        Some(vec!["read_file".to_string(), "bash".to_string()])
    );
    assert_eq!(
        parse_skill_md("---\nname: a\ndescription: b\nallowed-tools: []\n---\n")
            .unwrap()
            .allowed_tools,
        Some(vec![])
    );
    assert_eq!(
        parse_skill_md("---\nname: a\ndescription: b\n---\n")
            .unwrap()
            .allowed_tools,
        None
    );
    assert_eq!(
        parse_skill_md("# no front matter"),
        Err(SkillParseError::NoFrontMatter)
    );
    assert_eq!(
        parse_skill_md("---\nname: a\n"),
        Err(SkillParseError::NoFrontMatter)
    );
    assert_eq!(
        parse_skill_md("---\nname: a\n---\n"),
        Err(SkillParseError::Missing("description"))
    );
    assert_eq!(
        parse_skill_md("---\nname: '  '\ndescription: x\n---\n"),
        Err(SkillParseError::Missing("name"))
    );
    assert_eq!(
        parse_skill_md("---\n- a\n---\n"),
        Err(SkillParseError::NotAMapping)
    );
    assert_eq!(
        parse_skill_md("---\nname: a\ndescription: b\nallowed-tools: bash\n---\n"),
        Err(SkillParseError::BadAllowedTools)
    );
    assert_eq!(
        parse_skill_md("---\nname: a\ndescription: b\nallowed-tools: [\"\"]\n---\n"),
        Err(SkillParseError::BadAllowedTools)
    );
    let err = parse_skill_md("---\nname: a\ndescription: Use when: the user asks: anything\n---\n")
        .unwrap_err();
    assert!(
        err.to_string().contains("line 3") && err.to_string().contains("quote"),
        "{err}"
    );
}

#[test]
fn discovery_nests_stops_at_skills_skips_hidden_and_custom_wins() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    write(
        root,
        "public/report/SKILL.md",
        &skill("report", "public report"),
    );
    write(
        root,
        "public/report/nested/SKILL.md",
        &skill("ignored", "support data"),
    );
    write(
        root,
        "public/team/helper/SKILL.md",
        &skill("helper", "namespaced"),
    );
    write(root, "public/.hidden/SKILL.md", &skill("hidden", "x"));
    write(root, "public/broken/SKILL.md", "no front matter");
    write(
        root,
        "custom/report/SKILL.md",
        &skill("report", "my report"),
    );
    let found = discover(root, "/mnt/skills");
    let names: Vec<(&str, Category, &str)> = found
        .iter()
        .map(|s| (s.name.as_str(), s.category, s.container_file.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            (
                "helper",
                Category::Public,
                "/mnt/skills/public/team/helper/SKILL.md"
            ),
            (
                "report",
                Category::Custom,
                "/mnt/skills/custom/report/SKILL.md"
            ),
        ]
    );
}

#[test]
fn prompt_section_lists_enabled_escapes_and_respects_allowlists() {
    let t = tempfile::tempdir().unwrap();
    write(
        t.path(),
        "public/a/SKILL.md",
        &skill("alpha", "does <b>things</b> & more"),
    );
    write(t.path(), "public/b/SKILL.md", &skill("beta", "second"));
    let skills = discover(t.path(), "/mnt/skills");
    let mut enabled = BTreeMap::new();
    enabled.insert("beta".to_string(), false);
    let s = skills_section(&skills, &enabled, "/mnt/skills", None);
    assert!(s.starts_with("<skill_system>") && s.ends_with("</skill_system>"));
    assert!(s.contains("<skill><name>alpha</name><description>does &lt;b&gt;things&lt;/b&gt; &amp; more [built-in]</description><location>/mnt/skills/public/a/SKILL.md</location></skill>"), "{s}");
    assert!(s.contains("<disabled_skills>") && s.contains("- beta (public)"));
    assert!(!s.contains("<name>beta</name>"));
    assert_eq!(
        skills_section(&skills, &enabled, "/mnt/skills", Some(&[])),
        ""
    );
    let only = skills_section(
        &skills,
        &BTreeMap::new(),
        "/mnt/skills",
        Some(&["beta".to_string()]),
    );
    assert!(only.contains("<name>beta</name>") && !only.contains("alpha"));
    assert_eq!(
        skills_section(&[], &BTreeMap::new(), "/mnt/skills", None),
        ""
    );
}

#[test]
fn extensions_config_disables_skills() {
    let (t, p) = crate::test_fixtures::extensions_config(
        r#"{"mcpServers": {}, "skills": {"a": {"enabled": false}, "b": {}}}"#,
    );
    let m = enabled_states(&p);
    assert_eq!(m.get("a"), Some(&false));
    assert_eq!(m.get("b"), Some(&true));
    assert!(enabled_states(&t.path().join("missing.json")).is_empty());
}
