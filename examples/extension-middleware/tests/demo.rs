//! The example's middlewares sit at their slots and see the turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[tokio::test]
async fn the_extension_middlewares_run_at_their_slots() {
    let r = antler_example_extension_middleware::demo().await.unwrap();
    let pos = |line: &str| {
        r.chain
            .iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line} missing from {:#?}", r.chain))
    };
    assert_eq!(
        pos("ext LogicalCallCounterMiddleware") + 1,
        pos("S8 LLMErrorHandlingMiddleware")
    );
    assert_eq!(
        pos("S11 SandboxAuditMiddleware") + 1,
        pos("ext ToolAuditMiddleware")
    );
    assert_eq!(r.chain.last().unwrap(), "L22 ClarificationMiddleware");
    assert_eq!(r.audit, ["ls: success"]);
    assert_eq!(r.logical_model_calls, 2);
    assert_eq!(r.answer, "Your workspace is empty.");
}

#[test]
fn an_unknown_slot_is_refused_by_name() {
    let err = antler_example_extension_middleware::unknown_slot_error().unwrap();
    assert!(err.contains("'L99'"), "{err}");
}
