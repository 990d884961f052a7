//! extensions_config.json: validation messages, `$VAR`s, aliases, lookup order, fingerprints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use antler_mcp::config::{parse_server, Fingerprint, DEFAULT_SESSION_INIT_TIMEOUT};
use antler_mcp::{ExtensionsConfig, Lookup, RoutingMode, Transport};
use serde_json::{json, Map, Value};

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn err(v: Value) -> String {
    parse_server("srv", &v).unwrap_err().to_string()
}

#[test]
fn bad_entries_are_one_line_errors_naming_server_and_key() {
    assert_eq!(
        err(json!({})),
        "mcpServers.srv.command: a stdio server needs `command`"
    );
    assert_eq!(
        err(json!({"type": "http"})),
        "mcpServers.srv.url: an http server needs `url`"
    );
    assert_eq!(
        err(json!({"type": "sse", "url": ""})),
        "mcpServers.srv.url: an sse server needs `url`"
    );
    assert_eq!(
        err(json!({"type": "grpc", "url": "http://x"})),
        "mcpServers.srv.type: unknown transport 'grpc' (expected stdio, sse or http)"
    );
    assert!(err(json!({"command": "x", "args": "a b"}))
        .starts_with("mcpServers.srv.args: invalid type"));
    assert!(err(json!({"command": "x", "routing": {"mode": "always"}}))
        .starts_with("mcpServers.srv.routing.mode: unknown variant"));
    assert_eq!(
        err(
            json!({"type": "http", "url": "http://x", "oauth": {"token_url": "http://t", "client_id": "a"}})
        ),
        "mcpServers.srv.oauth.client_secret: required for grant_type ClientCredentials"
    );
    assert!(err(json!({"command": "x", "tool_call_timeout": -1}))
        .contains("mcpServers.srv.tool_call_timeout"));
    for e in [err(json!({})), err(json!({"command": "x", "args": 1}))] {
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn defaults_aliases_and_routing_overrides() {
    let s = parse_server("gh", &json!({"command": "npx", "args": ["-y", "pkg"]})).unwrap();
    assert!(s.enabled && s.tool_name_prefix);
    assert_eq!(s.session_init_timeout, Some(DEFAULT_SESSION_INIT_TIMEOUT));
    assert_eq!(s.tool_call_timeout, None);
    let s = parse_server("r", &json!({"transport": "http", "url": "http://h/mcp", "session_init_timeout": null, "tool_call_timeout": 2.5})).unwrap();
    assert!(matches!(s.transport, Transport::Http { .. }));
    assert_eq!(
        s.session_init_timeout, None,
        "an explicit null means unbounded"
    );
    assert_eq!(s.tool_call_timeout, Some(Duration::from_millis(2500)));
    // `type` wins over `transport`.
    let s = parse_server(
        "r",
        &json!({"type": "sse", "transport": "http", "url": "http://h/sse"}),
    )
    .unwrap();
    assert_eq!(s.transport.kind(), "sse");
    let s = parse_server(
        "db",
        &json!({
            "command": "x",
            "routing": {"mode": "prefer", "priority": 500, "keywords": ["SQL"]},
            "tools": {"query": {"routing": {"priority": 100, "keywords": ["订单表"]}}},
        }),
    )
    .unwrap();
    assert_eq!(s.routing.priority, 100, "clamped");
    let q = s.routing_for("query");
    assert_eq!(
        (q.mode, q.priority, q.keywords.clone()),
        (RoutingMode::Prefer, 100, vec!["订单表".to_owned()])
    );
    assert_eq!(s.routing_for("other").keywords, vec!["SQL"]);
}

#[test]
fn env_placeholders_resolve_and_unset_ones_become_empty() {
    let env = |k: &str| (k == "TOKEN").then(|| "t-1".to_owned());
    let c = ExtensionsConfig::from_raw(
        None,
        obj(json!({"mcpServers": {
            "a": {"command": "x", "env": {"T": "$TOKEN", "U": "$UNSET", "L": "literal"}},
            "b": {"type": "http", "url": "$UNSET"},
        }})),
        &env,
    )
    .unwrap();
    let Transport::Stdio { env, .. } = &c.servers[0].transport else {
        panic!()
    };
    assert_eq!(env["T"], "t-1");
    assert_eq!(env["U"], "");
    assert_eq!(env["L"], "literal");
    // A URL from an unset variable is empty: the entry fails, the other still loads.
    assert_eq!(
        c.errors,
        vec![(
            "b".to_owned(),
            "mcpServers.b.url: an http server needs `url`".to_owned()
        )]
    );
    assert!(c.validate().is_err());
}

#[test]
fn lookup_order() {
    let root = tempfile::tempdir().unwrap();
    let conf = root.path().join("conf");
    let cwd = root.path().join("cwd");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    let lookup = Lookup::new(Some(&conf.join("config.yaml")), &cwd);
    let none = |_: &str| None;
    assert_eq!(lookup.resolve_with_env(&none).unwrap(), None);
    std::fs::write(cwd.join("mcp_config.json"), "{}").unwrap();
    assert_eq!(
        lookup.resolve_with_env(&none).unwrap(),
        Some(cwd.join("mcp_config.json"))
    );
    std::fs::write(cwd.join("extensions_config.json"), "{}").unwrap();
    assert_eq!(
        lookup.resolve_with_env(&none).unwrap(),
        Some(cwd.join("extensions_config.json"))
    );
    std::fs::write(conf.join("extensions_config.json"), "{}").unwrap();
    assert_eq!(
        lookup.resolve_with_env(&none).unwrap(),
        Some(conf.join("extensions_config.json"))
    );
    let named = root.path().join("named.json");
    std::fs::write(&named, "{}").unwrap();
    let deer =
        |k: &str| (k == "DEER_FLOW_EXTENSIONS_CONFIG_PATH").then(|| named.display().to_string());
    assert_eq!(lookup.resolve_with_env(&deer).unwrap(), Some(named.clone()));
    let both = |k: &str| match k {
        "ANTLER_EXTENSIONS_CONFIG" => {
            Some(conf.join("extensions_config.json").display().to_string())
        }
        "DEER_FLOW_EXTENSIONS_CONFIG_PATH" => Some(named.display().to_string()),
        _ => None,
    };
    assert_eq!(
        lookup.resolve_with_env(&both).unwrap(),
        Some(conf.join("extensions_config.json"))
    );
    let missing = |k: &str| {
        (k == "DEER_FLOW_EXTENSIONS_CONFIG_PATH").then(|| "/nonexistent/x.json".to_owned())
    };
    let e = lookup.resolve_with_env(&missing).unwrap_err().to_string();
    assert!(
        e.contains("DEER_FLOW_EXTENSIONS_CONFIG_PATH names /nonexistent/x.json"),
        "{e}"
    );
}

#[test]
fn a_file_that_is_not_json_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("extensions_config.json");
    std::fs::write(&p, "{ not json").unwrap();
    let e = ExtensionsConfig::load(&p).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: not valid JSON", p.display())),
        "{e}"
    );
    std::fs::write(&p, r#"{"mcpServers": []}"#).unwrap();
    assert!(ExtensionsConfig::load(&p)
        .unwrap_err()
        .to_string()
        .contains("mcpServers: expected an object"));
}

#[test]
fn the_fingerprint_sees_same_size_edits() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("extensions_config.json");
    std::fs::write(&p, r#"{"a": 1}"#).unwrap();
    let a = Fingerprint::of(&p).unwrap();
    assert_eq!(Fingerprint::of(&p).unwrap(), a);
    std::fs::write(&p, r#"{"a": 2}"#).unwrap();
    let b = Fingerprint::of(&p).unwrap();
    assert_eq!(a.size, b.size);
    assert_ne!(a, b, "same size, same second: the hash differs");
}
