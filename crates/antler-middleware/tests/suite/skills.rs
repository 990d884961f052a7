//! SkillActivation + SkillToolPolicy: DeerFlow's expectations (spec 30 §SkillActivation,
//! §SkillToolPolicy) through the agent loop, over skills on disk in a temp folder.

use std::path::Path;
use std::sync::Arc;

use antler_middleware::skill_activation::*;
use antler_middleware::skill_registry::*;
use antler_middleware::skill_tool_policy::*;
use antler_models::{ScriptedModel, ScriptedReply};
use antler_protocol::markers::{ORIGINAL_USER_CONTENT, SLASH_SKILL_ACTIVATION};
use antler_protocol::{
    HumanMessage, Message, Object, Promoted, SkillEntry, StateUpdate, ThreadState, ToolMessage,
    ToolSpec,
};
use antler_runtime::*;
use serde_json::{json, Value};

use crate::common::FnTool;

/// `tool_search` promotes `bash` and `web_search`; every other tool answers "<name> ran".
fn echo(name: &'static str, ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
    {
        if name == "tool_search" {
            let content =
                json!([{"name": "bash"}, {"type": "function", "function": {"name": "web_search"}}])
                    .to_string();
            return Ok(ToolOutput::Command(Command {
                update: StateUpdate {
                    promoted: Some(Promoted {
                        catalog_hash: Some("h".into()),
                        names: vec!["bash".into(), "web_search".into()],
                    }),
                    messages: Some(vec![Message::Tool(
                        ToolMessage::new(ctx.call_id, content).with_name("tool_search"),
                    )]),
                    ..Default::default()
                },
                goto: None,
            }));
        }
        Ok(ToolOutput::text(format!("{name} ran")))
    }
}

fn tools() -> ToolRegistry {
    ["bash", "web_search", "task", "read_file", "tool_search"]
        .into_iter()
        .fold(ToolRegistry::new(), |r, n| {
            r.with(FnTool::named(n, move |_, ctx| echo(n, ctx)))
        })
}

fn skill(root: &Path, name: &str, allowed: Option<&[&str]>, body: &str) -> SkillRecord {
    let dir = root.join("public").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), body).unwrap();
    SkillRecord {
        name: name.into(),
        category: "public".into(),
        container_file: format!("/mnt/skills/public/{name}/SKILL.md"),
        host_file: dir.join("SKILL.md"),
        root: root.to_path_buf(),
        enabled: true,
        allowed_tools: allowed.map(|a| a.iter().map(|s| (*s).to_owned()).collect()),
        editable: false,
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    registry: Arc<dyn SkillRegistry>,
}

fn rig(make: impl FnOnce(&Path) -> Vec<SkillRecord>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let skills = make(dir.path());
    Rig {
        registry: Arc::new(StaticSkills(skills)),
        _dir: dir,
    }
}

fn chain(registry: &Arc<dyn SkillRegistry>, allow: Option<Vec<String>>) -> Chain {
    let token = owner_token();
    Chain::new(vec![
        Arc::new(
            SkillActivationMiddleware::new(registry.clone(), allow.clone(), token.clone()).unwrap(),
        ),
        Arc::new(SkillToolPolicyMiddleware::new(registry.clone(), allow, token).unwrap()),
    ])
    .unwrap()
}

struct Outcome {
    model: Arc<ScriptedModel>,
    out: antler_runtime::RunOutcome,
}

async fn run_with(chain: Chain, state: RunInput, replies: Vec<ScriptedReply>) -> Outcome {
    let model = Arc::new(ScriptedModel::new(replies));
    let agent = Agent::new(model.clone())
        .with_tools(tools())
        .with_chain(chain);
    let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)));
    let out = agent.run(state, run).await;
    assert_eq!(out.status, RunStatus::Success, "{:?}", out.error);
    Outcome { model, out }
}

/// A run of `input` with `r`'s skills and no allow-list, the model answering `ok`.
async fn answer_ok(r: &Rig, input: RunInput) -> Outcome {
    run_with(
        chain(&r.registry, None),
        input,
        vec![ScriptedReply::text("ok")],
    )
    .await
}

/// `/shell-only go` with the skill `shell-only` (body `body`, only `bash` allowed).
async fn shell_only_run(body: &str, replies: Vec<ScriptedReply>) -> Outcome {
    let r = rig(|root| vec![skill(root, "shell-only", Some(&["bash"]), body)]);
    run_with(chain(&r.registry, None), user("/shell-only go"), replies).await
}

fn user(text: &str) -> RunInput {
    RunInput::message(Message::Human(HumanMessage {
        content: text.into(),
        id: Some("u1".into()),
        ..Default::default()
    }))
}

fn reminders(msgs: &[Message]) -> Vec<&Message> {
    msgs.iter()
        .filter(|m| {
            antler_protocol::markers::has_flag(m.additional_kwargs(), SLASH_SKILL_ACTIVATION)
        })
        .collect()
}

fn tool_texts(out: &antler_runtime::RunOutcome) -> Vec<String> {
    out.state
        .messages
        .iter()
        .filter_map(Message::as_tool)
        .map(|t| t.content.text())
        .collect()
}

#[tokio::test]
async fn a_slash_command_injects_the_skill_once_hidden_and_request_only() {
    let r = rig(|root| {
        vec![skill(
            root,
            "deep-research",
            None,
            "# Research <carefully> & cite",
        )]
    });
    let o = run_with(
        chain(&r.registry, None),
        user("/deep-research find \"x\""),
        vec![
            ScriptedReply::tool_call("c1", "web_search", json!({})),
            ScriptedReply::text("ok"),
        ],
    )
    .await;
    let reqs = o.model.requests();
    let first = reminders(&reqs[0].messages);
    assert_eq!(first.len(), 1);
    let rem = first[0];
    assert_eq!(rem.id(), Some("u1__slash_activation"));
    assert!(rem.is_hidden());
    assert_eq!(
        rem.additional_kwargs()["slash_skill_activation_target_id"],
        json!("u1")
    );
    // Just before the user's message.
    let pos = reqs[0]
        .messages
        .iter()
        .position(|m| m.id() == Some("u1__slash_activation"))
        .unwrap();
    assert_eq!(reqs[0].messages[pos + 1].id(), Some("u1"));
    let text = rem.text();
    assert!(
        text.contains("<user_request>\nfind &quot;x&quot;\n</user_request>"),
        "{text}"
    );
    assert!(
        text.contains("# Research &lt;carefully&gt; &amp; cite"),
        "{text}"
    );
    assert!(text.contains("path=\"/mnt/skills/public/deep-research/SKILL.md\""));
    assert!(text.contains("editable=\"false\""));
    // Once per command per run; never persisted.
    assert!(reminders(&reqs[1].messages).is_empty());
    assert!(reminders(&o.out.state.messages.to_vec()).is_empty());
}

#[tokio::test]
async fn a_bare_command_asks_what_to_do_and_the_original_user_text_is_used() {
    let r = rig(|root| vec![skill(root, "ppt", None, "make slides")]);
    let mut h = HumanMessage {
        content: "<uploaded_files>a.pdf</uploaded_files>\n/ppt".into(),
        id: Some("u1".into()),
        ..Default::default()
    };
    h.additional_kwargs
        .insert(ORIGINAL_USER_CONTENT.into(), json!("/ppt"));
    let o = answer_ok(&r, RunInput::message(Message::Human(h))).await;
    let reqs = o.model.requests();
    let rem = reminders(&reqs[0].messages);
    assert_eq!(rem.len(), 1);
    assert!(rem[0].text().contains("ask them what they want to do"));
    assert!(!rem[0].text().contains("<user_request>"));
}

#[tokio::test]
async fn refused_commands_answer_without_calling_the_model() {
    let r = rig(|root| {
        let mut off = skill(root, "off", None, "x");
        off.enabled = false;
        let mut outside = skill(root, "outside", None, "x");
        let elsewhere = tempfile::tempdir().unwrap().keep().join("SKILL.md");
        std::fs::write(&elsewhere, "secret").unwrap();
        outside.host_file = elsewhere;
        let mut bad = skill(root, "bad-utf8", None, "x");
        std::fs::write(&bad.host_file, [0xff, 0xfe]).unwrap();
        bad.editable = false;
        vec![off, outside, bad, skill(root, "other", None, "x")]
    });
    let cases = [
        ("/missing do", "Skill `/missing` is not installed."),
        (
            "/off",
            "Skill `/off` is installed but disabled. Enable it before using slash activation.",
        ),
        ("/other", "Skill `/other` is not available for this agent."),
        (
            "/outside",
            "Skill `/outside` could not be loaded safely. Please check the skill installation.",
        ),
        (
            "/bad-utf8",
            "Skill `/bad-utf8` could not be loaded safely. Please check the skill installation.",
        ),
    ];
    for (input, answer) in cases {
        let allow = Some(vec![
            "off".into(),
            "outside".into(),
            "bad-utf8".into(),
            "missing".into(),
        ]);
        let o = run_with(chain(&r.registry, allow), user(input), vec![]).await;
        assert!(
            o.model.requests().is_empty(),
            "{input}: the model must not be called"
        );
        let last = o.out.state.messages.last().unwrap();
        assert_eq!(last.text(), answer);
    }
}

#[tokio::test]
async fn reserved_commands_and_older_user_messages_do_not_activate() {
    let r = rig(|root| {
        vec![
            skill(root, "help", None, "x"),
            skill(root, "ppt", Some(&["bash"]), "x"),
        ]
    });
    let o = answer_ok(&r, user("/help me")).await;
    assert!(reminders(&o.model.requests()[0].messages).is_empty());
    let mut input = user("thanks");
    input.messages.insert(
        0,
        Message::Human(HumanMessage {
            content: "/ppt".into(),
            id: Some("u0".into()),
            ..Default::default()
        }),
    );
    let o = answer_ok(&r, input).await;
    assert!(reminders(&o.model.requests()[0].messages).is_empty());
    assert_eq!(
        o.model.requests()[0].tools.len(),
        5,
        "nothing active, nothing restricted"
    );
}

#[tokio::test]
async fn an_active_slash_skill_restricts_offered_and_executed_tools() {
    let o = shell_only_run(
        "use bash",
        vec![
            ScriptedReply::tool_calls([
                ("c1".to_owned(), "bash".to_owned(), json!({})),
                ("c2".to_owned(), "web_search".to_owned(), json!({})),
                ("c3".to_owned(), "task".to_owned(), json!({})),
                ("c4".to_owned(), "read_file".to_owned(), json!({})),
            ]),
            ScriptedReply::text("ok"),
        ],
    )
    .await;
    let reqs = o.model.requests();
    let mut offered = reqs[0].tools.clone();
    offered.sort();
    assert_eq!(offered, ["bash", "read_file", "tool_search"]);
    assert_eq!(reqs[1].tools.len(), 3, "the policy stays for the run");
    assert_eq!(
        tool_texts(&o.out),
        [
            "bash ran",
            "Error: Tool 'web_search' is not allowed by the active skill policy.",
            "Error: Tool 'task' is not allowed by the active skill policy.",
            "read_file ran",
        ]
    );
}

#[tokio::test]
async fn read_skills_in_skill_context_apply_with_union_and_legacy_semantics() {
    let r = rig(|root| {
        vec![
            skill(root, "a", Some(&["bash"]), "x"),
            skill(root, "b", Some(&["web_search"]), "x"),
            skill(root, "legacy", None, "x"),
            skill(root, "empty", Some(&[]), "x"),
        ]
    });
    let entry = |n: &str| SkillEntry {
        name: n.into(),
        path: format!("/mnt/skills/public/{n}/SKILL.md"),
        ..Default::default()
    };
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["a", "b"],
            &["bash", "read_file", "tool_search", "web_search"],
        ),
        (&["a", "legacy"], &["bash", "read_file", "tool_search"]),
        (
            &["legacy"],
            &["bash", "read_file", "task", "tool_search", "web_search"],
        ),
        (&["empty"], &["read_file", "tool_search"]),
        (&["unknown"], &["read_file", "tool_search"]),
    ];
    for (active, expected) in cases {
        let mut input = user("go on");
        input.update = Some(StateUpdate {
            skill_context: Some(active.iter().map(|n| entry(n)).collect()),
            ..Default::default()
        });
        let o = answer_ok(&r, input).await;
        let mut offered = o.model.requests()[0].tools.clone();
        offered.sort();
        assert_eq!(offered, expected, "active {active:?}");
    }
}

#[tokio::test]
async fn a_forged_slash_source_is_ignored_and_a_registry_failure_fails_closed() {
    struct Broken;
    impl SkillRegistry for Broken {
        fn load(&self) -> Result<Vec<SkillRecord>, String> {
            Err("disk gone".into())
        }
    }
    let policy = SkillToolPolicyMiddleware::new(Arc::new(Broken), None, owner_token()).unwrap();
    let run = Arc::new(RunContext::new("t", "r", Arc::new(NullSink)));
    run.set(
        &SLASH_SOURCE,
        SlashSource {
            path: "/mnt/skills/public/x/SKILL.md".into(),
            owner_token: Arc::from("forged"),
        },
    );
    let model: Arc<dyn antler_models::ChatModel> = Arc::new(ScriptedModel::new([
        ScriptedReply::text("ok"),
        ScriptedReply::text("ok"),
    ]));
    let spec = |n: &str| {
        Arc::new(ToolSpec {
            name: n.into(),
            description: String::new(),
            parameters: json!({}),
        })
    };
    let req = |state: ThreadState| ModelRequest {
        model: model.clone(),
        system_prompt: None,
        messages: Arc::new(Vec::new()),
        tools: vec![spec("bash"), spec("read_file")],
        tool_choice: None,
        settings: Object::new(),
        stream: false,
        message_id: "m".into(),
        state: Arc::new(state),
        run: run.clone(),
    };
    let chain = Chain::new(vec![Arc::new(policy)]).unwrap();
    // Forged token: passive, nothing filtered, no decision stored.
    chain.call_model(req(ThreadState::default())).await.unwrap();
    assert!(run.get(&DECISION).is_none());
    // A read skill with a broken registry: only framework tools.
    let state = ThreadState {
        skill_context: vec![SkillEntry {
            path: "/mnt/skills/public/x/SKILL.md".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    chain.call_model(req(state)).await.unwrap();
    let d = run.get(&DECISION).unwrap();
    assert_eq!(d.source, PolicySource::SkillContext);
    assert_eq!(
        d.allowed_names.unwrap(),
        [
            "describe_skill",
            "read_file",
            "review_skill_package",
            "tool_search"
        ]
    );
}

#[tokio::test]
async fn tool_search_cannot_reveal_or_promote_tools_outside_the_policy() {
    let o = shell_only_run(
        "x",
        vec![
            ScriptedReply::tool_call("s", "tool_search", json!({})),
            ScriptedReply::text("ok"),
        ],
    )
    .await;
    let shown: Value = serde_json::from_str(&tool_texts(&o.out)[0]).unwrap();
    assert_eq!(shown, json!([{"name": "bash"}]));
    assert_eq!(o.out.state.promoted.as_ref().unwrap().names, ["bash"]);
}

#[test]
fn the_owner_token_is_required() {
    let reg: Arc<dyn SkillRegistry> = Arc::new(StaticSkills(Vec::new()));
    assert!(SkillActivationMiddleware::new(reg.clone(), None, Arc::from("")).is_err());
    assert!(SkillToolPolicyMiddleware::new(reg, None, Arc::from("")).is_err());
}
