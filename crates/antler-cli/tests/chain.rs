//! `antler chain`: the assembled middleware order, pinned for the default config and for
//! "everything on" (spec 20 §12: S = shared runtime segment, L = lead-only, U = subagent).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use antler_test_support::MockOpenAi;
use common::{ok_json, Project};
use pretty_assertions::assert_eq;

fn chain(p: &Project, args: &[&str]) -> Vec<String> {
    let mut full = vec!["chain", "--output", "json"];
    full.extend_from_slice(args);
    let out = p.run(&full);
    let v = ok_json(&out);
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["slot"].as_str().unwrap(),
                e["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// The full lead chain in order, each slot flagged by whether the default config assembles it
/// (the "everything on" config assembles them all).
const LEAD_CHAIN: &[(&str, bool)] = &[
    ("S1 InputSanitizationMiddleware", true),
    ("S2 ToolOutputBudgetMiddleware", true),
    ("S3 ToolResultSanitizationMiddleware", true),
    ("S4 ThreadDataMiddleware", true),
    ("S5 UploadsMiddleware", true),
    ("S6 SandboxMiddleware", true),
    ("S7 DanglingToolCallMiddleware", true),
    ("S8 LLMErrorHandlingMiddleware", true),
    ("S10 GuardrailMiddleware", false),
    ("S11 SandboxAuditMiddleware", true),
    ("S12 ReadBeforeWriteMiddleware", true),
    ("S13 ToolProgressMiddleware", false),
    ("S14 ToolErrorHandlingMiddleware", true),
    ("L1 DynamicContextMiddleware", true),
    ("L2 SkillActivationMiddleware", true),
    ("L3 SkillToolPolicyMiddleware", true),
    ("L4 DurableContextMiddleware", true),
    ("L5 DeerFlowSummarizationMiddleware", false),
    ("L6 TodoMiddleware", false),
    ("L7 TokenUsageMiddleware", true),
    ("L8 TitleMiddleware", true),
    ("L9 MemoryMiddleware", true),
    ("L10 ViewImageMiddleware", false),
    ("L13 SystemMessageCoalescingMiddleware", true),
    ("L14 SubagentLimitMiddleware", false),
    ("L15 LoopDetectionMiddleware", true),
    ("L16 TokenBudgetMiddleware", false),
    ("L19 TerminalResponseMiddleware", true),
    ("L20 ModelLengthFinishReasonMiddleware", true),
    ("L21 SafetyFinishReasonMiddleware", true),
    ("L22 ClarificationMiddleware", true),
];

/// Asserts the lead chain `config` and `args` assemble: all of [`LEAD_CHAIN`] when
/// `everything_on`, else only its default slots.
fn assert_lead_chain(config: &str, args: &[&str], everything_on: bool) {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, config);
    let expected: Vec<&str> = LEAD_CHAIN
        .iter()
        .filter(|(_, by_default)| everything_on || *by_default)
        .map(|(slot, _)| *slot)
        .collect();
    assert_eq!(chain(&p, args), expected);
}

#[test]
fn the_default_lead_chain_is_pinned() {
    assert_lead_chain("", &[], false);
}

#[test]
fn the_everything_on_lead_chain_is_pinned() {
    assert_lead_chain(
        "    supports_vision: true\nguardrails:\n  enabled: true\n  provider:\n    use: deerflow.guardrails.builtin:AllowlistProvider\n    config: {denied_tools: [bash]}\nsummarization:\n  enabled: true\n  trigger: {type: tokens, value: 32000}\ntoken_budget:\n  enabled: true\ntool_progress:\n  enabled: true\n",
        &["--plan-mode", "--subagents"],
        true,
    );
}

#[test]
fn the_subagent_chain_is_pinned() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(
        &mock,
        "summarization:\n  enabled: true\n  trigger: {type: tokens, value: 32000}\n",
    );
    assert_eq!(
        chain(&p, &["--subagent"]),
        [
            "S1 InputSanitizationMiddleware",
            "S2 ToolOutputBudgetMiddleware",
            "S3 ToolResultSanitizationMiddleware",
            "S4 ThreadDataMiddleware",
            "S6 SandboxMiddleware",
            "S7 DanglingToolCallMiddleware",
            "S8 LLMErrorHandlingMiddleware",
            "S11 SandboxAuditMiddleware",
            "S12 ReadBeforeWriteMiddleware",
            "S14 ToolErrorHandlingMiddleware",
            "U1 SkillActivationMiddleware",
            "U2 SkillToolPolicyMiddleware",
            "U6 LoopDetectionMiddleware",
            "U7 TokenBudgetMiddleware",
            "U9 SafetyFinishReasonMiddleware",
            "U10 DurableContextMiddleware",
            "U11 DeerFlowSummarizationMiddleware",
            "U13 SystemMessageCoalescingMiddleware",
        ]
    );
}

#[test]
fn text_output_lists_slots_names_and_hooks() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "");
    let out = p.run(&["chain"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with(" 1. S1   InputSanitizationMiddleware"),
        "{text}"
    );
    assert!(text.contains("L15  LoopDetectionMiddleware"), "{text}");
    assert!(
        text.contains("before_agent, after_model, after_agent, wrap_model"),
        "{text}"
    );
}

#[test]
fn read_before_write_is_removable_by_config() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "read_before_write:\n  enabled: false\n");
    let lead = chain(&p, &[]);
    assert!(!lead.iter().any(|e| e.starts_with("S12 ")), "{lead:?}");
    let sub = chain(&p, &["--subagent"]);
    assert!(!sub.iter().any(|e| e.starts_with("S12 ")), "{sub:?}");
}

#[test]
fn cold_mcp_slots_show_as_deferred_and_python_middlewares_as_skipped() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "tool_search:\n  enabled: true\n");
    std::fs::write(
        p.path().join("extensions_config.json"),
        r#"{"mcpServers": {"docs": {"type": "stdio", "command": "true"}}, "middlewares": ["pkg.audit:AuditMiddleware"]}"#,
    )
    .unwrap();
    let out = p.run(&["chain"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} missing:\n{text}"))
    };
    let (l9, l11, l12, l13) = (
        at("L9   MemoryMiddleware"),
        at("L11  McpRoutingMiddleware"),
        at("L12  DeferredToolFilterMiddleware"),
        at("L13  SystemMessageCoalescingMiddleware"),
    );
    assert!(l9 < l11 && l11 + 1 == l12 && l12 + 1 == l13, "{text}");
    assert!(lines[l12].contains("deferred (MCP)"), "{text}");
    assert!(
        text.contains("skipped Python middleware 'pkg.audit:AuditMiddleware'"),
        "{text}"
    );
    // JSON keeps one object per row; the placeholders say they are deferred.
    let json = chain(&p, &[]);
    assert!(json.contains(&"L12 DeferredToolFilterMiddleware".to_owned()));
    let stderr =
        String::from_utf8_lossy(&p.run(&["chain", "--output", "json"]).stderr).into_owned();
    assert!(stderr.contains("pkg.audit:AuditMiddleware"), "{stderr}");
}
