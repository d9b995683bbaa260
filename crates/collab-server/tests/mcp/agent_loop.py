"""An agent's whole loop through the official MCP Python SDK (`mcp` on
PyPI), whose stdio client launches `ssh ... collab-mcp` as the server
command, as Claude Code or any MCP client would. Run by the Rust test
`both::mcp::the_python_sdk_runs_an_agents_loop`, which starts the server
and passes, in the environment:

  MCP_SSH_A, MCP_SSH_B  JSON arrays: the ssh argv (without the program) of
                        two keys, ending in `collab-mcp`
  MCP_REPO              a repository both may write

Every check is an assert; the script prints `agent loop: ok` at the end.
"""

import json
import os

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = os.environ["MCP_REPO"]


def server(var):
    return StdioServerParameters(command="ssh", args=json.loads(os.environ[var]))


def structured(result):
    assert result.structured_content is not None, result
    return result.structured_content


async def call(session, name, args, **kw):
    result = await session.call_tool(name, args, **kw)
    return result, structured(result)


async def main():
    events = []

    async def on_log(params):
        if params.logger == "collab-events":
            events.append(params.data)

    async with stdio_client(server("MCP_SSH_A")) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as a:
            init = await a.initialize()
            assert init.protocol_version == "2025-11-25", init.protocol_version
            assert init.server_info.name == "git-collab"

            listed = await a.list_tools()
            names = {t.name for t in listed.tools}
            for want in ("issue_open", "lease_next", "issue_comment", "issue_close",
                         "events_read", "events_subscribe", "whoami"):
                assert want in names, (want, sorted(names))
            assert "upload_pack" not in " ".join(names)
            comment_tool = next(t for t in listed.tools if t.name == "issue_comment")
            props = comment_tool.input_schema["properties"]
            assert props["lease_token"]["type"] == "integer", props
            assert comment_tool.output_schema == {"type": "object"}

            # Follow the log from now, so the loop's events arrive as
            # notifications while it runs.
            _, sub = await call(a, "events_subscribe", {"repo": [REPO]})
            assert sub["status"] == "subscribed", sub

            # open -> next -> comment with the token.
            r, opened = await call(a, "issue_open", {
                "repo": REPO, "title": "agent work", "body": "from the SDK",
                "label": ["agent"]})
            assert not r.is_error, r
            issue = opened["issue"]
            assert r.content[0].text.startswith("{"), r.content

            r, claim = await call(a, "lease_next", {"repo": REPO, "ttl": 600, "label": ["agent"]})
            assert not r.is_error and claim["status"] == "acquired", claim
            assert claim["issue"] == issue, (claim, issue)
            token = claim["token"]

            r, commented = await call(a, "issue_comment", {
                "repo": REPO, "issue": issue, "body": "working on it", "lease_token": token})
            assert not r.is_error, r
            assert commented["status"] == "commented", commented

            # The lease is lost (released here; expiry or a break alike) and
            # someone else holds the issue: a write with the old token is
            # refused, with the live holder and token in the result.
            r, _ = await call(a, "lease_release", {"repo": REPO, "issue": issue})
            assert not r.is_error, r
            async with stdio_client(server("MCP_SSH_B")) as (read_b, write_b):
                async with ClientSession(read_b, write_b) as b:
                    await b.initialize()
                    r, taken = await call(b, "lease_acquire", {"repo": REPO, "issue": issue, "ttl": 600})
                    assert taken["status"] == "acquired", taken
                    live = taken["token"]
                    assert live > token, (live, token)

                    r, stale = await call(a, "issue_comment", {
                        "repo": REPO, "issue": issue, "body": "late", "lease_token": token})
                    assert r.is_error, r
                    assert stale["status"] == "fenced", stale
                    assert stale["token"] == live, stale
                    assert stale["holder"] == taken["holder"], stale
                    assert stale["error"].startswith("error:"), stale

                    # A long call reports progress while it waits: B lets
                    # the issue go after a moment.
                    progress = []

                    async def on_progress(value, total, message):
                        progress.append(value)

                    async def release_later():
                        await anyio.sleep(2.5)
                        r, _ = await call(b, "lease_release", {"repo": REPO, "issue": issue})
                        assert not r.is_error, r

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(release_later)
                        r, waited = await call(a, "lease_acquire", {
                            "repo": REPO, "issue": issue, "ttl": 600, "wait": 60},
                            progress_callback=on_progress)
                    assert waited["status"] == "acquired", waited
                    assert progress, "no progress notification while waiting"
                    assert progress == sorted(progress), progress
                    token = waited["token"]

            # close with the live token.
            r, closed = await call(a, "issue_close", {
                "repo": REPO, "issue": issue, "reason": "done", "lease_token": token})
            assert not r.is_error, r
            assert closed["status"] == "closed", closed

            # Nothing left: `next` answers empty, which is not an error.
            r, empty = await call(a, "lease_next", {"repo": REPO, "label": ["agent"]})
            assert not r.is_error and empty["status"] == "empty", empty

            # events: a page after seq 0 has the whole story, in order.
            r, page = await call(a, "events_read", {"repo": [REPO], "since": 0, "limit": 500})
            assert not r.is_error, r
            types = [e["type"] for e in page["events"] if e.get("object_id") == issue]
            for want in ("issue.opened", "issue.commented", "lease.acquired",
                         "lease.released", "issue.closed"):
                assert want in types, (want, types)
            seqs = [e["seq"] for e in page["events"]]
            assert seqs == sorted(seqs) and page["next_since"] == seqs[-1], page
            # A small page says there is more, and the next one goes on.
            r, first = await call(a, "events_read", {"repo": [REPO], "since": 0, "limit": 2})
            assert first["more"] is True and len(first["events"]) == 2, first
            r, second = await call(a, "events_read", {
                "repo": [REPO], "since": first["next_since"], "limit": 2})
            assert second["events"][0]["seq"] > first["next_since"], second

            # The subscription pushed the same events without a poll.
            with anyio.fail_after(30):
                while not any(e.get("type") == "issue.closed" and e.get("object_id") == issue
                              for e in events):
                    await anyio.sleep(0.1)
            pushed = [e["type"] for e in events if e.get("object_id") == issue]
            assert pushed[0] == "issue.opened", pushed

            # A long poll: nothing after the head yet, so events_read with
            # `wait` waits (reporting progress) until an issue is opened.
            polled_progress = []

            async def on_poll_progress(value, total, message):
                polled_progress.append(value)

            async def open_later():
                await anyio.sleep(2.5)
                r, _ = await call(a, "issue_open", {"repo": REPO, "title": "new work"})
                assert not r.is_error, r

            async with anyio.create_task_group() as tg:
                tg.start_soon(open_later)
                r, polled = await call(a, "events_read", {
                    "repo": [REPO], "since": page["next_since"], "wait": 60},
                    progress_callback=on_poll_progress)
            assert not r.is_error, r
            assert [e["type"] for e in polled["events"]] == ["issue.opened"], polled
            assert polled_progress, "no progress while the long poll waited"

            # Arguments the schema refuses are a tool error the model can
            # correct, and the session goes on.
            r = await a.call_tool("lease_acquire", {"repo": REPO, "issue": issue, "ttl": 0})
            assert r.is_error and "ttl" in r.content[0].text, r
            r = await a.call_tool("issue_show", {"repo": "no/such", "issue": issue})
            assert r.is_error and r.structured_content["error"] == "error: repository not found", r
            await a.send_ping()
    print("agent loop: ok")


anyio.run(main)
