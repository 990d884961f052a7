//! `antler run` end to end: the real binary, a real SQLite file, real tool processes, and a
//! mock OpenAI-compatible server on 127.0.0.1 that checks tool-call pairing on every request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use antler_test_support::{MockOpenAi, MockReply, MockToolCall};
use common::{
    as_text, assert_exit0, bash_call, custom_event, first_with, kinds, ls_call, ok_json, ok_jsonl,
    roles, scripted, signal, visible, wait_until, Project,
};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const BASH_ON: &str = "sandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  allow_host_bash: true\ntools:\n  - {name: ls, group: file:read, use: deerflow.sandbox.tools:ls_tool}\n  - {name: read_file, group: file:read, use: deerflow.sandbox.tools:read_file_tool}\n  - {name: write_file, group: file:write, use: deerflow.sandbox.tools:write_file_tool}\n  - {name: bash, group: bash, use: deerflow.sandbox.tools:bash_tool}\n";

fn streaming(on: bool) -> String {
    format!("    streaming: {on}\n")
}

fn tool_round_trip(stream: bool) {
    let (mock, p) = scripted(
        [
            MockReply::tool_call(
                "call_w",
                "write_file",
                json!({"description": "save", "path": "/mnt/user-data/workspace/notes.txt", "content": "hello antler"}),
            ),
            MockReply::tool_call(
                "call_r",
                "read_file",
                json!({"description": "check", "path": "/mnt/user-data/workspace/notes.txt"}),
            ),
            MockReply::text("The file says hello antler.").usage(30, 7),
        ],
        &format!("{}{BASH_ON}", streaming(stream)),
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "t1", "write a note"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success");
    assert_eq!(out["thread_id"], "t1");
    assert_eq!(out["error"], Value::Null);
    assert_eq!(
        kinds(&out["values"]),
        ["human", "ai", "tool", "ai", "tool", "ai"]
    );
    let msgs = &visible(&out["values"]);
    assert_eq!(msgs[4]["content"], "hello antler");
    assert_eq!(msgs[4]["status"], "success");
    assert_eq!(msgs[5]["content"], "The file says hello antler.");
    assert_eq!(msgs[5]["usage_metadata"]["total_tokens"], 37);
    // The file landed in the thread's workspace under ANTLER_HOME.
    let host = p.home().join("threads/t1/user-data/workspace/notes.txt");
    assert_eq!(std::fs::read_to_string(host).unwrap(), "hello antler");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.is_stream() == stream));
    assert_eq!(reqs[2].header("authorization"), Some("Bearer sk-test"));
    // The hidden date reminder goes to the model as a user message before the question.
    assert_eq!(
        roles(&reqs[2].body),
        [
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool"
        ]
    );
    assert!(reqs[2].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .starts_with("<system-reminder>"));
    // The model never sees a host path.
    assert!(!reqs[2]
        .body
        .to_string()
        .contains(p.home().to_str().unwrap()));
    mock.assert_no_violations();
}

#[test]
fn tool_round_trip_non_streaming() {
    tool_round_trip(false);
}

#[test]
fn tool_round_trip_streaming() {
    tool_round_trip(true);
}

#[test]
fn parallel_tool_calls_are_answered_in_call_order() {
    let (mock, p) = scripted(
        [
            MockReply::tool_calls([
                MockToolCall::new(
                    "call_a",
                    "bash",
                    json!({"description": "slow", "command": "sleep 0.3; echo first"}),
                ),
                MockToolCall::new(
                    "call_b",
                    "bash",
                    json!({"description": "fast", "command": "echo second"}),
                ),
            ]),
            MockReply::text("both ran"),
        ],
        BASH_ON,
    );
    let (code, out, stderr) = p.run_json(&["two at once"]);
    assert_eq!(code, 0, "{stderr}");
    let msgs = &visible(&out["values"]);
    assert_eq!(msgs[2]["tool_call_id"], "call_a");
    assert_eq!(msgs[2]["content"], "first\n");
    assert_eq!(msgs[3]["tool_call_id"], "call_b");
    assert_eq!(msgs[3]["content"], "second\n");
    mock.assert_no_violations();
}

#[test]
fn a_thread_resumes_from_sqlite_in_a_new_process() {
    let (mock, p) = scripted(
        [
            MockReply::text("first answer"),
            MockReply::text("second answer"),
        ],
        "",
    );
    let (code, _, stderr) = p.run_json(&["--thread-id", "resume-me", "first question"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, out, stderr) = p.run_json(&["--thread-id", "resume-me", "second question"]);
    assert_eq!(code, 0, "{stderr}");
    let texts: Vec<String> = visible(&out["values"])
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        texts,
        [
            "first question",
            "first answer",
            "second question",
            "second answer"
        ]
    );
    let second = &mock.requests()[1].body;
    // The date reminder is injected once per thread, not again on the same day.
    assert_eq!(
        roles(second),
        ["system", "user", "user", "assistant", "user"]
    );
    // The system prompt is byte-identical across turns (provider prefix caches).
    assert_eq!(
        mock.requests()[0].body["messages"][0],
        second["messages"][0]
    );
}

/// Every model call answers the same `ls` call again (fresh call ids).
fn repeat_ls_forever(mock: &MockOpenAi) {
    let n = std::sync::atomic::AtomicUsize::new(0);
    mock.set_fallback(move |_| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        MockReply::tool_call(
            format!("call_{i}"),
            "ls",
            json!({"description": "again", "path": "/mnt/user-data/workspace"}),
        )
    });
}

#[test]
fn the_recursion_limit_ends_the_run_with_an_error_status() {
    let mock = MockOpenAi::start_on_thread();
    repeat_ls_forever(&mock);
    let p = Project::new(&mock, BASH_ON);
    let (code, out, _) = p.run_json(&["--recursion-limit", "12", "loop forever"]);
    assert_eq!(code, 1);
    assert_eq!(out["status"], "error");
    assert!(
        as_text(&out["error"]).starts_with("Recursion limit of 12 reached"),
        "{}",
        out["error"]
    );
    // Every committed tool call still has its result.
    mock.assert_no_violations();
}

#[test]
fn malformed_provider_responses_are_recoverable() {
    let (mock, p) = scripted(
        [
            // Bad JSON arguments → an invalid tool call, never executed; the turn ends.
            MockReply::tool_call("call_bad", "ls", Value::String("{not json".into())),
            // Missing tool-call id → antler assigns one so the result pairs.
            MockReply::tool_calls([MockToolCall::without_id(
                "ls",
                json!({"description": "list", "path": "/mnt/user-data/workspace"}),
            )]),
            MockReply::text("recovered"),
            // A body that is not JSON at all, on every attempt → retried, then a graceful answer
            // and status error; never a crash.
            MockReply::raw_body(200, "this is not json"),
            MockReply::raw_body(200, "this is not json"),
            MockReply::raw_body(200, "this is not json"),
        ],
        BASH_ON,
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "m", "go"]);
    assert_eq!(code, 0, "{stderr}");
    let ai = &visible(&out["values"])[1];
    assert_eq!(ai["tool_calls"], json!([]));
    assert_eq!(ai["invalid_tool_calls"][0]["args"], "{not json");

    let (code, out, stderr) = p.run_json(&["--thread-id", "m", "again"]);
    assert_eq!(code, 0, "{stderr}");
    let msgs = &visible(&out["values"]);
    let call_id = msgs[3]["tool_calls"][0]["id"].as_str().unwrap();
    assert!(!call_id.is_empty());
    assert_eq!(msgs[4]["tool_call_id"], call_id);
    assert_eq!(msgs[5]["content"], "recovered");

    let (code, out, stderr) = p.run_json(&["--thread-id", "m", "third"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "error");
    assert!(out["error"].as_str().is_some());
    let last = visible(&out["values"]).last().unwrap().clone();
    assert_eq!(last["additional_kwargs"]["deerflow_error_fallback"], true);
    assert_eq!(mock.remaining(), 0, "all three attempts were made");
    mock.assert_no_violations();
}

#[test]
fn ctrl_c_interrupts_the_run_and_keeps_the_checkpoint() {
    let (mock, p) = scripted([bash_call("call_1", "slow", "sleep 30")], BASH_ON);
    let child = p.spawn_run("c", "json", "run something long", Stdio::piped());
    // Wait until the tool is running: the bash process exists under the workspace.
    let ws = p.home().join("threads/c/user-data/workspace");
    wait_until("the tool to start", Duration::from_secs(30), || {
        mock.requests().len() == 1 && ws.exists() && sleeping_child(child.id())
    });
    signal(child.id(), "-INT");
    let out = child.wait_with_output().unwrap();
    let v = ok_json(&out);
    assert_eq!(v["status"], "interrupted");
    // The AI message that made the call was checkpointed before the tool ran.
    assert_eq!(kinds(&v["values"]), ["human", "ai"]);
    let show = p.run(&["threads", "show", "c", "--output", "json"]);
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(kinds(&shown["values"]), ["human", "ai"]);
}

/// Whether `pid` has a `sleep` descendant.
fn sleeping_child(pid: u32) -> bool {
    let out = std::process::Command::new("ps")
        .args(["-eo", "ppid=,pid=,comm="])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<(u32, u32, String)> = table
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((
                it.next()?.parse().ok()?,
                it.next()?.parse().ok()?,
                it.next()?.to_owned(),
            ))
        })
        .collect();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (pp, c, comm) in &rows {
            if *pp == p {
                if comm == "sleep" {
                    return true;
                }
                frontier.push(*c);
            }
        }
    }
    false
}

#[test]
fn text_output_streams_tokens_and_shows_tool_activity() {
    let (_mock, p) = scripted(
        [
            ls_call("call_1", "look", "/mnt/user-data/missing"),
            MockReply::text("Nothing there, all done."),
        ],
        &format!("{}{BASH_ON}", streaming(true)),
    );
    let out = p.run(&["run", "look around"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, "Nothing there, all done.\n");
    assert!(
        stderr.contains("  → ls(/mnt/user-data/missing)\n"),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("  ✓ ls:") || l.starts_with("  ✗ ls:")),
        "{stderr}"
    );
}

#[test]
fn jsonl_output_uses_langgraph_event_names() {
    let (_mock, p) = scripted(
        [
            ls_call("call_1", "look", "/mnt/user-data/workspace"),
            MockReply::text("done"),
        ],
        BASH_ON,
    );
    let out = p.run(&["run", "--output", "jsonl", "go"]);
    let events = ok_jsonl(&out);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"metadata"));
    assert_eq!(names.last(), Some(&"end"));
    for n in ["values", "updates", "messages"] {
        assert!(names.contains(&n), "{names:?}");
    }
    // One message id everywhere: the final AI message's id is the one its chunks used.
    let last_values = events
        .iter()
        .rev()
        .find(|e| e["event"] == "values")
        .unwrap();
    let final_id = last_values["data"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["id"]
        .clone();
    assert!(events.iter().any(|e| e["event"] == "messages"
        && e["data"][0]["type"] == "AIMessageChunk"
        && e["data"][0]["id"] == final_id));
}

#[test]
fn zero_config_uses_openai_env_vars() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::text("hi from zero config")]);
    let p = Project::empty();
    let out = p
        .cmd(&["run", "--output", "json", "hello"])
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("OPENAI_API_KEY", "sk-zero")
        .env("ANTLER_MODEL", "tiny-model")
        .output()
        .unwrap();
    let v = ok_json(&out);
    assert_eq!(visible(&v["values"])[1]["content"], "hi from zero config");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("no config.yaml found; using the built-in default"));
    let req = &mock.requests()[0];
    assert_eq!(req.body["model"], "tiny-model");
    assert_eq!(req.header("authorization"), Some("Bearer sk-zero"));
    assert!(p.home().join("antler.db").exists());
}

#[test]
fn bad_config_and_unknown_model_exit_non_zero_with_one_line() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "max_recursion_limit: lots\n");
    let out = p.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("config.yaml") && err.contains("max_recursion_limit"),
        "{err}"
    );

    let p = Project::new(&mock, "");
    let out = p
        .cmd(&["run", "hi"])
        .env_remove("MOCK_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MOCK_KEY") && err.contains("models[0].api_key"),
        "{err}"
    );

    let out = p.run(&["run", "--model", "nope", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown model 'nope'"));
    assert_eq!(mock.requests().len(), 0);
}

#[test]
fn unreachable_store_exits_non_zero() {
    let mock = MockOpenAi::start_on_thread();
    let p = Project::new(&mock, "");
    std::fs::write(p.path().join("not-a-dir"), "x").unwrap();
    let out = p
        .cmd(&["run", "hi"])
        .env("ANTLER_HOME", p.path().join("not-a-dir"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
fn threads_list_and_show() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::text("answer one")]);
    let p = Project::new(&mock, "");
    let (code, _, _) = p.run_json(&["--thread-id", "listed", "what is antler?"]);
    assert_eq!(code, 0);
    let list = p.run(&["threads", "list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("listed") && text.contains("idle") && text.contains("what is antler?"),
        "{text}"
    );
    let list: Value =
        serde_json::from_slice(&p.run(&["threads", "list", "--output", "json"]).stdout).unwrap();
    assert_eq!(list[0]["thread_id"], "listed");
    let show = p.run(&["threads", "show", "listed"]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains("[user] what is antler?") && text.contains("[assistant] answer one"),
        "{text}"
    );
    let missing = p.run(&["threads", "show", "nope"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn config_init_writes_a_template_that_checks_clean() {
    let p = Project::empty();
    let out = p.run(&["config", "init"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(p.path().join("config.yaml").exists());
    let again = p.run(&["config", "init"]);
    assert_eq!(again.status.code(), Some(2));
    let check = p
        .cmd(&["config", "check"])
        .env("OPENAI_API_KEY", "sk")
        .output()
        .unwrap();
    assert_exit0(&check);
    assert!(
        String::from_utf8_lossy(&check.stderr).is_empty(),
        "warnings: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn attached_files_are_uploaded_and_listed_for_the_model() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::text("read it")]);
    let p = Project::new(&mock, "");
    std::fs::write(p.path().join("report.txt"), "quarterly numbers").unwrap();
    let (code, out, stderr) = p.run_json(&[
        "--thread-id",
        "up",
        "--attach",
        "report.txt",
        "--",
        "summarize the report",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let human = &visible(&out["values"])[0];
    assert_eq!(
        human["additional_kwargs"]["files"][0]["path"],
        "/mnt/user-data/uploads/report.txt"
    );
    assert_eq!(
        std::fs::read_to_string(p.home().join("threads/up/user-data/uploads/report.txt")).unwrap(),
        "quarterly numbers"
    );
    // The model was told about the upload before any tool use, by its virtual path.
    let sent = mock.requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .to_string();
    assert!(sent.contains("/mnt/user-data/uploads/report.txt"), "{sent}");
    // A missing attachment is refused before anything runs.
    let out = p.run(&["run", "--attach", "nope.txt", "--", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn skills_are_listed_in_the_prompt_and_readable_read_only() {
    let (mock, p) = scripted(
        [
            MockReply::tool_call(
                "call_1",
                "read_file",
                json!({"description": "load skill", "path": "/mnt/skills/public/deck/SKILL.md"}),
            ),
            MockReply::tool_call(
                "call_2",
                "write_file",
                json!({"description": "try", "path": "/mnt/skills/public/deck/SKILL.md", "content": "x"}),
            ),
            MockReply::text("done"),
        ],
        BASH_ON,
    );
    let skill_dir = p.public_skill(
        "deck",
        "---\nname: deck-builder\ndescription: Build slide decks\n---\nStep 1: outline.\n",
    );
    let (code, out, stderr) = p.run_json(&["make slides"]);
    assert_eq!(code, 0, "{stderr}");
    let system = mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.contains("<name>deck-builder</name>")
            && system.contains("<location>/mnt/skills/public/deck/SKILL.md</location>"),
        "{system}"
    );
    let msgs = &visible(&out["values"]);
    assert!(
        as_text(&msgs[2]["content"]).contains("Step 1: outline."),
        "{}",
        msgs[2]
    );
    // The read is stamped so DurableContext keeps a reference to the skill after summarization.
    assert_eq!(
        msgs[2]["additional_kwargs"]["skill_context_entry"],
        json!({"name": "deck-builder", "path": "/mnt/skills/public/deck/SKILL.md", "description": "Build slide decks"})
    );
    assert_eq!(msgs[4]["status"], "error");
    assert!(std::fs::read_to_string(skill_dir.join("SKILL.md"))
        .unwrap()
        .ends_with("Step 1: outline.\n"));
}

#[test]
fn custom_agents_bring_their_model_soul_and_tool_groups() {
    let mock =
        MockOpenAi::start_on_thread().with_replies([MockReply::text("hello from the researcher")]);
    let p = Project::new(&mock, &format!("  - name: fast\n    use: langchain_openai:ChatOpenAI\n    model: fast-model\n    base_url: {}\n    api_key: $MOCK_KEY\n{BASH_ON}", mock.base_url()));
    let dir = p.home().join("agents/researcher");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.yaml"),
        "name: researcher\ndescription: digs\nmodel: fast\ntool_groups: [file:read]\n",
    )
    .unwrap();
    std::fs::write(dir.join("SOUL.md"), "Curious and careful.").unwrap();
    let (code, _, stderr) = p.run_json(&["--agent", "researcher", "hi"]);
    assert_eq!(code, 0, "{stderr}");
    let body = &mock.requests()[0].body;
    assert_eq!(body["model"], "fast-model");
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("You are researcher,") && system.contains("Curious and careful."),
        "{system}"
    );
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"read_file") && !tools.contains(&"write_file") && !tools.contains(&"bash"),
        "{tools:?}"
    );
    let out = p.run(&["run", "--agent", "nobody", "hi"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn anthropic_models_run_through_the_messages_api() {
    use antler_test_support::{AnthropicReply, MockAnthropic};
    for streaming in [false, true] {
        let mock = MockAnthropic::start_on_thread().with_replies([
            AnthropicReply::tool_use(
                "toolu_1",
                "ls",
                json!({"description": "look", "path": "/mnt/user-data/workspace"}),
            ),
            AnthropicReply::text("Empty workspace.").usage(20, 4),
        ]);
        let p = Project::empty();
        std::fs::write(
            p.path().join("config.yaml"),
            format!(
                "models:\n  - name: claude\n    use: langchain_anthropic:ChatAnthropic\n    model: claude-test\n    base_url: {}\n    api_key: $MOCK_KEY\n    max_tokens: 2048\n    streaming: {streaming}\nmemory:\n  enabled: false\n{BASH_ON}",
                mock.base_url()
            ),
        )
        .unwrap();
        let (code, out, stderr) = p.run_json(&["what is in the workspace?"]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(kinds(&out["values"]), ["human", "ai", "tool", "ai"]);
        assert_eq!(visible(&out["values"])[3]["content"], "Empty workspace.");
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[1].header("x-api-key"), Some("sk-test"));
        assert_eq!(reqs[1].body["model"], "claude-test");
        assert_eq!(
            reqs[1].body["messages"][2]["content"][0]["type"],
            "tool_result"
        );
        mock.assert_no_violations();
    }
}

#[test]
fn an_endlessly_repeating_tool_call_is_warned_then_stopped() {
    let mock = MockOpenAi::start_on_thread();
    repeat_ls_forever(&mock);
    let p = Project::new(&mock, BASH_ON);
    let (code, out, stderr) = p.run_json(&["loop"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 5, "hard stop on the 5th response");
    // The warning is transient: attached to the request after the 3rd repeat only.
    let warned: Vec<bool> = reqs
        .iter()
        .map(|r| r.body["messages"].to_string().contains("[LOOP DETECTED]"))
        .collect();
    assert_eq!(warned, [false, false, false, true, false]);
    let last = out["values"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["type"], "ai");
    assert_eq!(last["tool_calls"], json!([]));
    assert_eq!(last["response_metadata"]["finish_reason"], "stop");
    mock.assert_no_violations();
}

#[test]
fn six_task_calls_run_three_subagents() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::tool_calls((0..6).map(|i| {
        MockToolCall::new(
            format!("call_t{i}"),
            "task",
            json!({"description": format!("part {i}"), "prompt": format!("do part {i}"), "subagent_type": "general-purpose"}),
        )
    }))]);
    mock.set_fallback(|body| {
        let system = body["messages"][0]["content"].as_str().unwrap_or("");
        if system.contains("general-purpose subagent") {
            let prompt = body["messages"][1]["content"].to_string();
            MockReply::text(format!("finished {prompt}")).usage(10, 5)
        } else {
            MockReply::text("all parts done")
        }
    });
    let p = Project::new(&mock, BASH_ON);
    let (code, out, stderr) = p.run_json(&["--subagents", "split the work"]);
    assert_eq!(code, 0, "{stderr}");
    let msgs = &visible(&out["values"]);
    // The AI message keeps exactly three task calls, in both mirrors.
    assert_eq!(msgs[1]["tool_calls"].as_array().unwrap().len(), 3);
    assert_eq!(
        msgs[1]["additional_kwargs"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let results: Vec<&Value> = msgs.iter().filter(|m| m["type"] == "tool").collect();
    assert_eq!(results.len(), 3);
    for r in &results {
        assert!(
            as_text(&r["content"]).starts_with("Task Succeeded. Result: finished"),
            "{}",
            r["content"]
        );
        assert_eq!(r["additional_kwargs"]["subagent_status"], "completed");
    }
    // Three subagent model calls; subagents were never offered `task`.
    let sub_reqs: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .contains("general-purpose subagent")
        })
        .collect();
    assert_eq!(sub_reqs.len(), 3);
    for r in &sub_reqs {
        let tools: Vec<&str> = r.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            !tools.contains(&"task") && !tools.contains(&"present_files"),
            "{tools:?}"
        );
    }
    assert_eq!(msgs.last().unwrap()["content"], "all parts done");
    mock.assert_no_violations();
}

#[test]
fn a_long_conversation_is_summarized_without_orphaned_tool_results() {
    let mock = MockOpenAi::start_on_thread();
    let n = std::sync::atomic::AtomicUsize::new(0);
    mock.set_fallback(move |body| {
        let msgs = body["messages"].as_array().unwrap();
        // The summary call: no tools, the conversation in one prompt.
        if body.get("tools").is_none() && msgs.len() == 1 {
            return MockReply::text("## Overall intent\nkeep chatting\n## Key context\nturns so far\n## Artifacts\nNone\n## Next steps\nNone");
        }
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Every other turn calls a tool first, so cutoffs must respect call/result pairs.
        if i.is_multiple_of(3) && msgs.last().map(|m| m["role"] == "user").unwrap_or(false) {
            MockReply::tool_call(format!("call_{i}"), "ls", json!({"description": "look", "path": "/mnt/user-data/workspace"}))
        } else {
            MockReply::text(format!("reply {i}"))
        }
    });
    let p = Project::new(
        &mock,
        &format!("{BASH_ON}summarization:\n  enabled: true\n  trigger: {{type: messages, value: 10}}\n  keep: {{type: messages, value: 4}}\n"),
    );
    let mut last = Value::Null;
    for turn in 0..60 {
        let (code, out, stderr) = p.run_json(&["--thread-id", "long", &format!("turn {turn}")]);
        assert_eq!(code, 0, "turn {turn}: {stderr}");
        last = out;
    }
    let reqs = mock.requests();
    let summaries = reqs
        .iter()
        .filter(|r| r.body.get("tools").is_none())
        .count();
    assert!(summaries >= 5, "only {summaries} summary requests");
    mock.assert_no_violations();
    // The final state: a hidden summary message plus recent history, bounded.
    let msgs = last["values"]["messages"].as_array().unwrap();
    assert!(msgs
        .iter()
        .any(|m| m["name"] == "summary" && m["additional_kwargs"]["hide_from_ui"] == true));
    assert!(
        msgs.len() < 25,
        "history not compacted: {} messages",
        msgs.len()
    );
    assert!(msgs.iter().any(|m| m["content"] == "turn 59"));
    // The full transcript still has the first turns.
    let full = p.run(&["threads", "show", "long", "--full"]);
    let text = String::from_utf8_lossy(&full.stdout);
    assert!(
        text.contains("[user] turn 0\n")
            && text.contains("[user] turn 30\n")
            && text.contains("[user] turn 59\n"),
        "{text}"
    );
    let short = String::from_utf8_lossy(&p.run(&["threads", "show", "long"]).stdout).into_owned();
    assert!(!short.contains("[user] turn 0\n"));
}

#[test]
fn a_429_with_retry_after_is_retried_after_that_wait() {
    let (mock, p) = scripted(
        [
            MockReply::error(
                429,
                antler_test_support::openai_error(
                    "slow down",
                    "rate_limit_exceeded",
                    Some("rate_limit_exceeded"),
                ),
            )
            .retry_after(1),
            MockReply::text("second attempt worked"),
        ],
        "",
    );
    let out = p.run(&["run", "--output", "jsonl", "hi"]);
    let events = ok_jsonl(&out);
    let retry = custom_event(&events, "llm_retry");
    assert_eq!(retry["data"]["wait_ms"], 1000);
    assert_eq!(retry["data"]["attempt"], 1);
    assert_eq!(mock.requests().len(), 2);
    let last_values = events
        .iter()
        .rev()
        .find(|e| e["event"] == "values")
        .unwrap();
    assert_eq!(
        visible(&last_values["data"]).last().unwrap()["content"],
        "second attempt worked"
    );
}

#[test]
fn a_401_gets_a_friendly_answer_exit_0_and_status_error() {
    let mock = MockOpenAi::start_on_thread().with_replies([MockReply::error(
        401,
        antler_test_support::openai_error(
            "Incorrect API key provided",
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
    )]);
    let p = Project::new(&mock, "");
    let (code, out, stderr) = p.run_json(&["hi"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "error");
    assert!(out["error"].as_str().is_some());
    let last = visible(&out["values"]).last().unwrap().clone();
    assert_eq!(last["type"], "ai");
    assert_eq!(last["additional_kwargs"]["deerflow_error_fallback"], true);
    assert!(!last["content"].as_str().unwrap().is_empty());
    // Auth errors are not retried.
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn after_kill_9_during_a_tool_call_the_next_run_sends_a_patched_history() {
    let (mock, p) = scripted(
        [
            bash_call("call_long", "slow", "sleep 30"),
            MockReply::text("picked up again"),
        ],
        BASH_ON,
    );
    let child = p.spawn_run("k9", "json", "start something long", Stdio::null());
    wait_until("the tool to start", Duration::from_secs(30), || {
        sleeping_child(child.id())
    });
    signal(child.id(), "-9");
    let mut child = child;
    child.wait().unwrap();
    let (code, out, stderr) = p.run_json(&["--thread-id", "k9", "are you there?"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        visible(&out["values"]).last().unwrap()["content"],
        "picked up again"
    );
    // The request paired the dangling call with a synthetic result right after its AI message.
    let body = &mock.requests()[1].body;
    let msgs = body["messages"].as_array().unwrap();
    let ai = msgs.iter().position(|m| m["role"] == "assistant").unwrap();
    assert_eq!(msgs[ai + 1]["role"], "tool");
    assert_eq!(msgs[ai + 1]["tool_call_id"], "call_long");
    assert_eq!(
        msgs.last().unwrap()["content"]
            .as_str()
            .map(|s| s.contains("are you there?")),
        Some(true)
    );
    mock.assert_no_violations();
}

#[test]
fn clarification_ends_the_run_and_the_next_run_continues() {
    let (mock, p) = scripted(
        [
            MockReply::tool_call(
                "call_q",
                "ask_clarification",
                json!({"question": "Which format do you want?", "clarification_type": "approach_choice", "options": ["PDF", "Markdown"]}),
            ),
            MockReply::text("Writing it as Markdown."),
        ],
        "",
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "cl", "write the report"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out["status"], "success");
    let last = visible(&out["values"]).last().unwrap().clone();
    assert_eq!(last["type"], "tool");
    assert_eq!(last["name"], "ask_clarification");
    assert_eq!(last["id"], "clarification:call_q");
    assert!(as_text(&last["content"]).contains("Which format do you want?"));
    assert!(
        last["artifact"]["human_input"].is_object(),
        "{}",
        last["artifact"]
    );
    assert_eq!(mock.requests().len(), 1, "no model call after the question");
    let (code, out, _) = p.run_json(&["--thread-id", "cl", "Markdown"]);
    assert_eq!(code, 0);
    assert_eq!(
        visible(&out["values"]).last().unwrap()["content"],
        "Writing it as Markdown."
    );
    let roles = roles(&mock.requests()[1].body);
    assert_eq!(&roles[roles.len() - 3..], ["assistant", "tool", "user"]);
    mock.assert_no_violations();
}

#[test]
fn a_5_mb_tool_output_reaches_the_model_bounded_and_with_a_receipt() {
    let mock = MockOpenAi::start_on_thread().with_replies([
        bash_call("call_big", "dump", "head -c 5000000 /dev/zero | tr '\\0' a"),
        MockReply::text("that was big"),
    ]);
    // bash's own cap off, so the 5 MB reach the tool-output budget.
    let p = Project::new(
        &mock,
        &BASH_ON.replace(
            "  allow_host_bash: true\n",
            "  allow_host_bash: true\n  bash_output_max_chars: 0\n",
        ),
    );
    let (code, out, stderr) = p.run_json(&["--thread-id", "big", "make a lot of output"]);
    assert_eq!(code, 0, "{stderr}");
    let second = &mock.requests()[1].body;
    let tool = first_with(&second["messages"], "role", "tool");
    let content = tool["content"].as_str().unwrap();
    assert!(
        content.len() < 50_000,
        "the model got {} bytes",
        content.len()
    );
    // The marker names where the full output is kept, as a path the model can read.
    let receipt = content
        .split_whitespace()
        .find(|w| w.contains("/mnt/user-data/outputs/.tool-results/"))
        .expect("a receipt path in the marker")
        .trim_matches(|c: char| !(c.is_alphanumeric() || "/._-".contains(c)));
    let host = p
        .home()
        .join("threads/big/user-data")
        .join(receipt.trim_start_matches("/mnt/user-data/"));
    assert_eq!(
        std::fs::metadata(&host).unwrap().len(),
        5_000_000,
        "{}",
        host.display()
    );
    assert_eq!(
        visible(&out["values"]).last().unwrap()["content"],
        "that was big"
    );
    mock.assert_no_violations();
}
