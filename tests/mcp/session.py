"""Drives `homebased mcp` over stdio with the official MCP Python SDK, as a coding agent
would, against the real daemon of a test home. Run by tests/tests/mcp.rs:

    session.py SCENARIO

with HOMEBASED_BIN (the binary), HOMEBASED_TEST_HOME (the state home, its daemon
running) and HOMEBASED_TEST_WORKDIR (the jobs' cwd, and the server's). Each scenario checks
what the agent sees and prints one JSON line of what it saw last; a failed check exits 1
naming it.
"""

import asyncio
import json
import os
import subprocess
import sys
import uuid

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

BIN = os.environ["HOMEBASED_BIN"]
HOME = os.environ["HOMEBASED_TEST_HOME"]
WORKDIR = os.environ["HOMEBASED_TEST_WORKDIR"]

TOOLS = {
    "resource_list",
    "jobs",
    "job_submit",
    "job_show",
    "job_log",
    "task_log",
    "job_move",
    "job_cancel",
    "events_wait",
    "schema",
}


class Failed(Exception):
    pass


def check(cond, what, *seen):
    if not cond:
        raise Failed(what + "".join("\n  saw: " + repr(s) for s in seen))


def cli(*args):
    """`homebased --home HOME --json ARGS`: the object the CLI prints (or its error)."""
    out = subprocess.run(
        [BIN, "--home", HOME, "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout if out.returncode == 0 else out.stderr
    return out.returncode, json.loads(text)


def server(extra_env=None):
    """The agent's client configuration: `homebased mcp`, with the agent's environment."""
    env = dict(os.environ)
    env.update(extra_env or {})
    return StdioServerParameters(
        command=BIN, args=["--home", HOME, "mcp"], env=env, cwd=WORKDIR
    )


async def call(session, tool, arguments=None):
    """A tool's answer as the agent reads it: (is_error, structured, text parsed). The text
    always carries the same JSON as the structured content."""
    result = await session.call_tool(tool, arguments or {})
    check(result.content, f"{tool} answered text content", result)
    text = json.loads(result.content[0].text)
    check(
        text == result.structured_content,
        f"{tool}: the text is the structured content",
        text,
        result.structured_content,
    )
    return bool(result.is_error), result.structured_content


async def ok(session, tool, arguments=None):
    is_error, answer = await call(session, tool, arguments)
    check(not is_error, f"{tool} succeeded", answer)
    check(answer.get("api_version", 1) == 1, f"{tool} answers api_version 1", answer)
    return answer


async def refused(session, tool, arguments, code):
    is_error, answer = await call(session, tool, arguments)
    check(is_error, f"{tool} {arguments} is a tool error", answer)
    check(answer.get("api_version") == 1, "the envelope carries api_version 1", answer)
    error = answer.get("error", {})
    check(error.get("code") == code, f"{tool} {arguments} refused with {code}", answer)
    for key in ("code", "message", "retryable", "input"):
        check(key in error, f"the envelope has {key}", answer)
    return error


def spec(thread, name, command):
    return {
        "api_version": 1,
        "thread": thread,
        "name": name,
        "cwd": WORKDIR,
        "priority": "medium",
        "preempt": {"mode": "restart"},
        "workload": {"type": "task", "command": command},
    }


async def wait_for(session, thread, job, event, cursor=None):
    """events_wait until `event` of `job` comes; answers it and the next cursor."""
    for _ in range(20):
        arguments = {"thread": thread, "timeout": "30s"}
        if cursor is not None:
            arguments["after"] = cursor
        answer = await ok(session, "events_wait", arguments)
        check(isinstance(answer.get("cursor"), str), "events_wait answers a cursor", answer)
        cursor = answer["cursor"]
        for e in answer["events"]:
            check(e["thread"] == thread, "only the thread's events", e)
            if e["job"] == job and e["event"] == event:
                return e, cursor
    raise Failed(f"no {event} of {job} on thread {thread}")


async def tools_scenario(session):
    listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    check(names == TOOLS, "the tools of SPEC 15", sorted(names))
    check(not any("release" in n for n in names), "no release tool", sorted(names))
    by_name = {t.name: t for t in listed.tools}
    for t in listed.tools:
        check("full UUIDs" in (t.description or ""), f"{t.name} says ids are full UUIDs")
        check(t.input_schema.get("type") == "object", f"{t.name} takes an object")
    submit = by_name["job_submit"]
    check("job_id" in submit.input_schema["properties"], "submit takes job_id")
    check("never resubmit" in submit.description, "submit says never to resubmit")
    check("operation_id" in by_name["job_move"].input_schema["required"], "move needs an id")
    code, printed = cli("resource", "schema")
    check(code == 0, "resource schema prints", printed)
    check(
        await ok(session, "schema") == printed,
        "the schema tool answers what resource schema prints",
    )
    check(
        submit.input_schema["properties"]["spec"]["properties"] == printed["properties"],
        "submit's spec schema is the one resource schema prints",
    )
    return {"tools": sorted(names)}


async def submit_scenario(session, mark):
    thread, job = str(uuid.uuid4()), str(uuid.uuid4())
    job_spec = spec(thread, "agent job", ["/bin/sh", "-c", 'echo "agent says $AGENT_MARK"'])
    first = await ok(session, "job_submit", {"spec": job_spec, "job_id": job})
    check(first["job"] == job, "the job is the one named", first)
    again = await ok(session, "job_submit", {"spec": job_spec, "job_id": job})
    check(again["job"] == job, "a repeated submit answers the same job", again)
    other = dict(job_spec, name="another job")
    conflict = await refused(
        session, "job_submit", {"spec": other, "job_id": job}, "job_conflict"
    )
    check(conflict["retryable"] is False, "a conflict is not retryable", conflict)

    event, cursor = await wait_for(session, thread, job, "JOB_SUCCEEDED")
    later = await ok(session, "events_wait", {"thread": thread, "after": cursor, "timeout": "1s"})
    check(later["events"] == [], "nothing after the cursor", later)
    check(later["cursor"] == cursor, "an empty answer keeps the cursor", later)

    log = await ok(session, "job_log", {"job": job})
    check(log["job"] == job and len(log["runs"]) == 1, "one run in the log", log)
    check(
        log["runs"][0]["log"] == f"agent says {mark}\n",
        "the run saw the agent's environment variable",
        log,
    )
    task = log["runs"][0]["task"]
    task_log = await ok(session, "task_log", {"task": task, "tail": 5})
    check(task_log["log"] == log["runs"][0]["log"], "task_log reads the same log", task_log)

    # Exactly the objects the CLI's --json prints.
    for tool, arguments, command in [
        ("job_show", {"job": job}, ["resource", "job", "show", job]),
        ("job_log", {"job": job}, ["resource", "job", "log", job]),
        ("task_log", {"task": task}, ["task", "log", task]),
        ("jobs", {}, ["resource", "jobs"]),
        ("resource_list", {}, ["resource", "list"]),
    ]:
        code, printed = cli(*command)
        check(code == 0, f"{' '.join(command)} prints", printed)
        answer = await ok(session, tool, arguments)
        if tool == "resource_list":
            # The GPU sample may move between the two reads; the lanes may not.
            answer = [(r["id"], r["name"], r["run"]) for r in answer["resources"]]
            printed = [(r["id"], r["name"], r["run"]) for r in printed["resources"]]
        check(answer == printed, f"{tool} answers what {' '.join(command)} prints", answer, printed)

    unknown = str(uuid.uuid4())
    missing = await refused(session, "job_show", {"job": unknown}, "job_not_found")
    check(missing["retryable"] is False, "an unknown job is not retryable", missing)
    return {"job": job, "event": event, "log": log}


async def bad_input_scenario(session):
    try:
        await session.call_tool("resource_release", {})
        raise Failed("an unknown tool is refused")
    except MCPError as e:
        check("no tool named" in e.message and "job_submit" in e.message, "names the tools", e.message)
    thread = str(uuid.uuid4())
    await refused(session, "job_show", {"job": 42}, "usage")
    await refused(session, "job_show", {}, "usage")
    await refused(session, "job_show", {"job": str(uuid.uuid4()), "verbose": True}, "usage")
    await refused(session, "job_show", {"job": "0190"}, "invalid_queue_input")
    await refused(session, "job_log", {"job": str(uuid.uuid4()), "tail": "ten"}, "usage")
    for not_object in ["{}", [1, 2], 7, None]:
        error = await refused(
            session, "job_submit", {"spec": not_object, "job_id": str(uuid.uuid4())}, "invalid_spec"
        )
        check(error["input"]["pointer"] == "", "the spec's root is named", error)
    await refused(session, "job_submit", {"spec": spec(thread, "x", ["true"]), "job_id": "j"}, "invalid_queue_input")
    await refused(session, "job_submit", {"spec": dict(spec(thread, "x", ["true"]), extra=1)}, "invalid_spec")
    await refused(session, "job_move", {"job": str(uuid.uuid4()), "placement": {"front": True}}, "usage")
    await refused(
        session,
        "job_move",
        {"job": str(uuid.uuid4()), "placement": {"sideways": True}, "operation_id": str(uuid.uuid4())},
        "usage",
    )
    await refused(session, "job_cancel", {"job": str(uuid.uuid4()), "operation_id": "again"}, "invalid_queue_input")
    await refused(session, "events_wait", {"thread": thread, "timeout": "6m"}, "usage")
    await refused(session, "events_wait", {"thread": thread, "after": "x"}, "usage")
    await refused(session, "schema", {"anything": 1}, "usage")
    # Nothing reached the queue, and the server still serves.
    jobs = await ok(session, "jobs")
    check(jobs["jobs"] == [], "nothing was queued", jobs)
    empty = await ok(session, "events_wait", {"thread": thread, "timeout": "1s"})
    check(empty["events"] == [], "no events for the thread", empty)
    return {"jobs": jobs}


async def restart_scenario(session, mark):
    before = await ok(session, "jobs")
    code, stopped = cli("daemon", "stop")
    check(code == 0 and stopped["socket"] == "down", "the daemon stopped", stopped)
    down = await refused(session, "jobs", {}, "daemon_unavailable")
    check(down["retryable"] is True, "a daemon that is down is retryable", down)
    thread, job = str(uuid.uuid4()), str(uuid.uuid4())
    job_spec = spec(thread, "after restart", ["/bin/sh", "-c", 'echo "back $AGENT_MARK"'])
    lost = await refused(session, "job_submit", {"spec": job_spec, "job_id": job}, "daemon_unavailable")
    check(lost["retryable"] is True, "a submit to a down daemon is retryable", lost)
    code, started = cli("daemon", "start")
    check(code == 0 and started["socket"] == "up", "the daemon started again", started)
    after = await ok(session, "jobs")
    check(after["jobs"] == before["jobs"], "the same session serves again", after)
    # The retry the error asked for, with the same job id.
    await ok(session, "job_submit", {"spec": job_spec, "job_id": job})
    await wait_for(session, thread, job, "JOB_SUCCEEDED")
    log = await ok(session, "job_log", {"job": job})
    check(log["runs"][0]["log"] == f"back {mark}\n", "the job ran after the restart", log)
    return {"job": job, "log": log}


async def main(scenario):
    mark = "agent-" + uuid.uuid4().hex[:8]
    async with stdio_client(server({"AGENT_MARK": mark})) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if scenario == "tools":
                seen = await tools_scenario(session)
            elif scenario == "submit":
                seen = await submit_scenario(session, mark)
            elif scenario == "bad_input":
                seen = await bad_input_scenario(session)
            elif scenario == "restart":
                seen = await restart_scenario(session, mark)
            else:
                raise Failed(f"no scenario {scenario}")
    seen["mark"] = mark
    print(json.dumps(seen))


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except Failed as e:
        print(f"check failed: {e}", file=sys.stderr)
        sys.exit(1)
