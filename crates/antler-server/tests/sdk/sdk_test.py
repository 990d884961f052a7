"""Drive `antler serve` with the official Python langgraph-sdk the way DeerFlow's UI does.

Run by run.sh against a live server backed by the `mock_openai` scripted model. Exits non-zero
(listing every failed check) if any field the UI or the SDK reads is missing or wrong.
Plain Python, no pytest.
"""

import argparse
import re
import sys
import time

import httpx
from langgraph_sdk import get_sync_client

FAILURES = []
CHECKS = 0


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        FAILURES.append(what)
        print(f"  FAIL: {what}", flush=True)
    return cond


def section(name):
    print(f"- {name}", flush=True)


EVENT_ID = re.compile(r"^\d+-\d+$")


def check_stream(parts, run_id, thread_id, label):
    """Framing rules every run stream must follow."""
    check(parts and parts[0].event == "metadata", f"{label}: metadata first")
    if parts:
        md = parts[0].data or {}
        check(md.get("run_id") == run_id, f"{label}: metadata.run_id is the Content-Location run id")
        check(md.get("thread_id") == thread_id, f"{label}: metadata.thread_id")
    check(parts and parts[-1].event == "end", f"{label}: end last")
    seqs = []
    for p in parts[:-1]:
        ok = p.id is not None and EVENT_ID.match(p.id)
        check(ok, f"{label}: {p.event} event has an id <ms>-<seq> (got {p.id!r})")
        if ok:
            seqs.append(int(p.id.split("-")[1]))
    check(seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"{label}: ids strictly increase")
    for p in parts:
        if p.event == "messages":
            ok = isinstance(p.data, list) and len(p.data) == 2 and isinstance(p.data[1], dict)
            check(ok, f"{label}: messages data is a [message, metadata] pair")


def visible(messages):
    return [
        m for m in messages
        if not (m.get("additional_kwargs", {}).get("hide_from_ui")
                and "human_input_response" not in m.get("additional_kwargs", {}))
    ]


def check_message_fields(m, label):
    for k in ("type", "id", "content", "additional_kwargs", "response_metadata"):
        check(k in m, f"{label}: message has {k}")
    check(bool(m.get("id")), f"{label}: message id is non-empty")
    if m.get("type") == "ai":
        for k in ("tool_calls", "invalid_tool_calls", "usage_metadata"):
            check(k in m, f"{label}: ai message has {k}")
    if m.get("type") == "tool":
        for k in ("tool_call_id", "name", "status", "artifact"):
            check(k in m, f"{label}: tool message has {k}")


def wait_status(client, thread_id, run_id, want, timeout=15.0):
    deadline = time.time() + timeout
    status = None
    while time.time() < deadline:
        status = client.runs.get(thread_id, run_id)["status"]
        if status == want:
            return status
        time.sleep(0.05)
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="e.g. http://127.0.0.1:2026/api/langgraph")
    ap.add_argument("--api-key", default=None)
    args = ap.parse_args()
    client = get_sync_client(url=args.url, api_key=args.api_key)
    raw = httpx.Client(base_url=args.url, headers={"x-api-key": args.api_key} if args.api_key else {})

    section("auth")
    if args.api_key:
        anon = httpx.get(f"{args.url}/threads/x")
        check(anon.status_code == 401, "no key: 401")
        detail = anon.json().get("detail", {})
        check(isinstance(detail, dict) and detail.get("code") == "not_authenticated", "401 detail shape")

    section("assistants")
    assistants = client.assistants.search()
    check(any(a["assistant_id"] == "lead_agent" for a in assistants), "lead_agent is listed")

    section("threads.create")
    thread = client.threads.create(metadata={"source": "sdk-test"})
    tid = thread["thread_id"]
    check(thread["status"] == "idle", "new thread is idle")
    check(thread["values"] == {}, "new thread values are {}")
    check(thread["metadata"].get("source") == "sdk-test", "metadata kept")
    for k in ("created_at", "updated_at", "interrupts"):
        check(k in thread, f"thread has {k}")

    section("runs.stream with tool calls (values, messages-tuple, custom)")
    created = {}
    parts = list(client.runs.stream(
        tid, "lead_agent",
        input={"messages": [{"role": "user", "content": "Please list the workspace"}]},
        stream_mode=["values", "messages-tuple", "custom"],
        on_disconnect="continue",
        config={"recursion_limit": 1000},
        on_run_created=lambda m: created.update(m),
    ))
    run_id = created.get("run_id")
    check(run_id is not None, "on_run_created fired from Content-Location")
    check(created.get("thread_id") == tid, "Content-Location carries the thread id")
    check_stream(parts, run_id, tid, "tool run")
    names = {p.event for p in parts}
    check(names <= {"metadata", "values", "messages", "custom", "end"}, f"only requested modes ({names})")
    chunks = [p.data[0] for p in parts if p.event == "messages" and p.data[0].get("type") == "AIMessageChunk"]
    tool_msgs = [p.data for p in parts if p.event == "messages" and p.data[0].get("type") == "tool"]
    check(any(c.get("tool_call_chunks") and c["tool_call_chunks"][0].get("name") == "ls" for c in chunks),
          "the tool call streams as tool_call_chunks")
    check(len(tool_msgs) == 1 and tool_msgs[0][0].get("name") == "ls", "one tool result message")
    if tool_msgs:
        check(tool_msgs[0][1].get("langgraph_node") == "tools", "tool result metadata names the tools node")
        check_message_fields(tool_msgs[0][0], "streamed tool message")
    for c in chunks:
        check(isinstance(c.get("content"), (str, list)) and c.get("id"), "AI chunk has id and content")
    values = [p.data for p in parts if p.event == "values"]
    check(bool(values), "values events arrive")
    final = values[-1] if values else {}
    msgs = visible(final.get("messages", []))
    check([m["type"] for m in msgs] == ["human", "ai", "tool", "ai"], f"final values hold the turn ({[m['type'] for m in msgs]})")
    for m in msgs:
        check_message_fields(m, "final values")
    ids = {m["id"] for m in final.get("messages", [])}
    check(all(c["id"] in ids for c in chunks), "streamed AI ids are the ids in values")
    for k in ("title", "artifacts", "todos"):
        check(k in final, f"values carry {k}")
    check(msgs and "The tool answered" in str(msgs[-1].get("content")), "the answer follows the tool result")

    section("runs.get / runs.list")
    run = client.runs.get(tid, run_id)
    check(run["status"] == "success", f"run succeeded ({run['status']})")
    for k in ("run_id", "thread_id", "assistant_id", "created_at", "updated_at", "metadata", "kwargs", "multitask_strategy"):
        check(k in run, f"run has {k}")
    runs = client.runs.list(tid)
    check([r["run_id"] for r in runs][:1] == [run_id], "runs.list newest first")

    section("threads.get_state / get_history / search")
    state = client.threads.get_state(tid)
    check(state["next"] == [] and state["tasks"] == [], "state next/tasks empty")
    check(state["checkpoint"]["checkpoint_id"] and state["checkpoint"]["checkpoint_ns"] == "", "state checkpoint config")
    check(len(visible(state["values"]["messages"])) == 4, "state holds the messages")
    hist1 = client.threads.get_history(tid, limit=1)
    check(len(hist1) == 1, "history limit 1")
    if hist1:
        h = hist1[0]
        check("checkpoint" not in h and "parent_checkpoint" not in h, "history entries carry no checkpoint objects")
        check(len(visible(h["values"].get("messages", []))) == 4, "history head carries messages")
        ai = [m for m in h["values"]["messages"] if m["type"] == "ai"]
        check(all(m.get("run_id") == run_id for m in ai), "history ai messages carry run_id")
        check(isinstance(ai[-1]["additional_kwargs"].get("turn_duration"), int) if ai else False,
              "last AI message carries turn_duration")
    hist5 = client.threads.get_history(tid, limit=5)
    check(1 < len(hist5) <= 5, "history limit 5")
    check(all("messages" not in h["values"] for h in hist5[1:]), "only the first entry carries messages")
    found = client.threads.search(metadata={"source": "sdk-test"}, limit=10)
    check([t["thread_id"] for t in found] == [tid], "search by metadata")
    if found:
        check(found[0]["values"].get("title"), "search values carry the title")

    section("messages/page (gateway feed)")
    page = raw.get(f"/threads/{tid}/messages/page", params={"limit": 50}).json()
    rows = page.get("data", [])
    check([r["seq"] for r in rows] == list(range(1, len(rows) + 1)), "feed seq strictly increasing from 1")
    state_ids = [m["id"] for m in visible(state["values"]["messages"])]
    check([r["content"]["id"] for r in rows] == state_ids, "feed ids equal state ids")
    check(page.get("has_more") is False and page.get("next_before_seq") is None, "single page")

    section("join_stream of a finished run replays it")
    joined = list(client.runs.join_stream(tid, run_id, last_event_id="-1"))
    check(joined and joined[0].event == "metadata" and joined[-1].event == "end", "replay: metadata … end")

    section("runs.wait")
    out = client.runs.wait(tid, "lead_agent", input={"messages": [{"role": "user", "content": "hello again"}]})
    check(isinstance(out, dict) and "You said: hello again" in str(visible(out.get("messages", []))[-1:]),
          "wait returns the final values")

    section("stop button: drop the stream, cancel, rejoin")
    created = {}
    stream = client.runs.stream(
        tid, "lead_agent",
        input={"messages": [{"role": "user", "content": "be slow please"}]},
        stream_mode=["values", "messages-tuple"], on_disconnect="continue",
        on_run_created=lambda m: created.update(m),
    )
    for p in stream:
        if p.event == "messages":
            break
    stream.close()
    slow_id = created.get("run_id")
    check(client.runs.get(tid, slow_id)["status"] in ("pending", "running"), "the run outlives its client")
    client.runs.cancel(tid, slow_id, wait=False, action="interrupt")
    check(wait_status(client, tid, slow_id, "interrupted") == "interrupted", "cancel → interrupted")
    client.runs.cancel(tid, slow_id, wait=False, action="interrupt")  # idempotent 202
    check(True, "second cancel accepted")
    rest = list(client.runs.join_stream(tid, slow_id, last_event_id="-1"))
    check(rest and rest[-1].event == "end" and not any(p.event == "error" for p in rest),
          "rejoin ends with end, no error")
    try:
        client.runs.cancel(tid, run_id)
        check(False, "cancelling a finished run is refused")
    except httpx.HTTPStatusError as e:
        check(e.response.status_code == 409, "finished run: 409")
        check(f"Run {run_id} is not cancellable (status: success)" in e.response.text, "409 detail text")
    check(client.threads.get(tid)["status"] == "interrupted", "thread interrupted after the cancel")

    section("clarification and its answer")
    created = {}
    parts = list(client.runs.stream(
        tid, "lead_agent",
        input={"messages": [{"role": "user", "content": "Book me a flight"}]},
        stream_mode=["values", "messages-tuple", "custom"],
        on_run_created=lambda m: created.update(m),
    ))
    q_id = created.get("run_id")
    check_stream(parts, q_id, tid, "clarification run")
    tools = [p.data[0] for p in parts if p.event == "messages" and p.data[0].get("type") == "tool"]
    clar = next((t for t in tools if t.get("name") == "ask_clarification"), None)
    check(clar is not None, "the clarification streams as a tool message")
    if clar:
        check(clar.get("id") == "clarification:call_q9", f"clarification message id ({clar.get('id')})")
        hi = (clar.get("artifact") or {}).get("human_input") or {}
        check(hi.get("kind") == "human_input_request", "artifact.human_input.kind")
        check(hi.get("question") == "Which date and destination?", "artifact.human_input.question")
        check(hi.get("request_id") == "clarification:call_q9", "artifact.human_input.request_id")
        check([o.get("value") for o in hi.get("options", [])] == ["Tomorrow to Tokyo", "Next week to Paris"],
              "artifact.human_input.options")
    check(client.runs.get(tid, q_id)["status"] == "success", "a clarification ends the run as success")
    answer = {"messages": [{
        "type": "human", "content": [{"type": "text", "text": "Next week to Paris"}],
        "additional_kwargs": {"hide_from_ui": True, "human_input_response": {
            "version": 1, "kind": "human_input_response", "source": "ask_clarification",
            "request_id": "clarification:call_q9", "response_kind": "option",
            "option_id": "option-2", "value": "Next week to Paris"}}}]}
    parts = list(client.runs.stream(tid, "lead_agent", input=answer, stream_mode=["values"]))
    final = [p.data for p in parts if p.event == "values"][-1]
    last_human = [m for m in final["messages"] if m["type"] == "human"][-1]
    check(last_human["additional_kwargs"].get("human_input_response", {}).get("option_id") == "option-2",
          "the answer is recorded with its human_input_response")
    check(final["messages"][-1]["type"] == "ai", "the model answered the answer")

    section("threads.delete")
    client.threads.delete(tid)
    try:
        client.threads.get(tid)
        check(False, "deleted thread is gone")
    except httpx.HTTPStatusError as e:
        check(e.response.status_code == 404, "deleted thread: 404")

    print(f"{CHECKS - len(FAILURES)}/{CHECKS} checks passed", flush=True)
    if FAILURES:
        print("FAILED:\n  " + "\n  ".join(FAILURES), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
