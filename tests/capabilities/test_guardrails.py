"""guardrails: redaction rewrites and the run finishes; a blocked term ends it as guardrail_blocked, said in the chat."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from bindings.loader import ConfigError, load_config
from capabilities.registry import BuildContext, REGISTRY, load_all
from gateway.ops import cli
from gateway import extensions
from gateway.messages import ChatKind
from gateway.store import repo

from ..conftest import write_config
from .shaping_script import SCRIPT, Call, call, chat_text, mcp_server, say
from .shaping_mcp_server import SECRET
from .support import Account, Place, World, agent, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)
PASTED = "sk-ant-" + "api03-" + "Zx9" * 10


def _agent(**config: Any) -> dict[str, Any]:
    spec = agent({"id": "guardrails", "config": config}, model="shaping-scripted")
    spec["mcp_servers"] = [mcp_server("svc", tools={"leak": "allow", "page": "allow"})]
    return spec


def _record_chat(w: World) -> list[str]:
    """Every text the fake platform was handed, drafts and edits included."""
    shown: list[str] = []
    adapter = w.adapter("slack")
    post, edit = adapter.post_message, adapter.edit_message

    async def posting(target: Any, text: str) -> str:
        shown.append(text)
        return await post(target, text)

    async def editing(target: Any, message_id: str, text: str) -> None:
        shown.append(text)
        await edit(target, message_id, text)

    adapter.post_message, adapter.edit_message = posting, editing  # type: ignore[method-assign]
    return shown


async def _last_run(w: World) -> Any:
    from sqlalchemy import select

    from gateway.store.models import Run

    async with w.gw.store.sessions() as s:
        return (await s.scalars(select(Run).order_by(Run.created_at.desc()).limit(1))).one()


async def _stored_replies(w: World) -> list[str]:
    from sqlalchemy import text

    async with w.gw.store.sessions() as s:
        return list(await s.scalars(text("SELECT text FROM messages WHERE role = 'assistant'")))


def _blocked_count(w: World) -> float:
    return sum(sample.value for metric in w.gw.metrics.runs.collect() for sample in metric.samples
               if sample.name.endswith("_total") and sample.labels["platform"] == "slack"
               and sample.labels["outcome"] == repo.GUARDRAIL_BLOCKED)


async def test_a_secret_in_an_mcp_result_is_redacted_before_the_model_reads_it(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": _agent(redact_secrets_tool=True)}) as w:
        SCRIPT.reset(call("svc_leak", service="billing"), say("the billing config is fine"))
        await w.say(ALICE, DM, "check the billing config")
        [result] = SCRIPT.requests[1].tool_results()
        assert result == "billing config: token=[redacted:github_token] region=eu"
        assert all(SECRET not in str(m) for r in SCRIPT.requests for m in r.messages)
        run = await _last_run(w)
        assert run.status == repo.FINISHED, "redaction rewrites; the run finishes"
        assert SECRET not in (run.state or "")


async def test_a_large_result_is_screened_whole_before_it_is_spilled(tmp_path: Path) -> None:
    spec = _agent(redact_secrets_tool=True)
    spec["capabilities"].append({"id": "tool_output_limits"})
    spec["mcp_servers"] = [mcp_server("svc", tools={"dump": "allow"})]
    handle = re.compile(r"stored to handle '([^']+)'")

    def read_back(messages: object) -> Call:
        [preview] = SCRIPT.requests[-1].tool_results()
        match = handle.search(preview)
        assert match, preview
        return Call("read_tool_result", {"handle": match.group(1), "pattern": "token="})

    async with world(tmp_path, agents={"assistant": spec}) as w:
        SCRIPT.reset(call("svc_dump", rows=5000), read_back, say("found it"))
        await w.say(ALICE, DM, "find the token in the config")
        [page] = SCRIPT.requests[2].tool_results()
        assert page.splitlines()[1] == "line 002500: token=[redacted:github_token] # PROJECT-NIGHTJAR"
        assert all(SECRET not in str(m) for r in SCRIPT.requests for m in r.messages)

    async with world(tmp_path / "blocked", agents={"assistant": {**spec, "capabilities": [
            {"id": "guardrails", "config": {"blocked_keywords_tool": "nightjar"}}, {"id": "tool_output_limits"}]}}) as w:
        SCRIPT.reset(call("svc_dump", rows=5000), say("found it"))
        await w.say(ALICE, DM, "read the config")
        assert len(SCRIPT.requests) == 1, "a term deep inside a large result ends the run; it is not spilled past"
        assert (await _last_run(w)).status == repo.GUARDRAIL_BLOCKED


async def test_a_blocked_term_in_a_fetched_page_ends_the_run_and_says_so(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    async with world(tmp_path, agents={"assistant": _agent(blocked_keywords_tool="launch codes, nightjar")}) as w:
        SCRIPT.reset(call("svc_page", url="https://example.com"), say("the page says hello"))
        await w.say(ALICE, DM, "read example.com")
        assert len(SCRIPT.requests) == 1, "the model never read the page"
        run = await _last_run(w)
        assert run.status == repo.GUARDRAIL_BLOCKED
        assert "blocked term in a tool result" in run.reason and "svc_page" in run.reason
        assert "I stopped: what a tool returned contains a term this agent's guardrails block." in chat_text(w)
        assert _blocked_count(w) == 1
    # What an operator lists (the daemon stopped: the CLI opens the database itself).
    args = ["runs", "list", "--status", "guardrail_blocked", "--config", str(tmp_path)]
    assert await asyncio.to_thread(cli.main, args) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert f"guardrail_blocked run {run.id} agent assistant" in line and "blocked term in a tool result" in line


async def test_the_persons_message_is_redacted_now_and_in_later_turns_or_blocked(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": _agent(redact_secrets_in=True,
                                                           blocked_keywords_in="project nightjar")}) as w:
        SCRIPT.reset(say("noted"))
        await w.say(ALICE, DM, f"my key is {PASTED}, keep it safe")
        assert SCRIPT.requests[0].user_texts() == ["my key is [redacted:anthropic_key], keep it safe"]
        SCRIPT.reset(say("hello again"))
        await w.say(ALICE, DM, "what did I tell you?")
        texts = SCRIPT.requests[0].user_texts()
        assert texts[0] == "my key is [redacted:anthropic_key], keep it safe" and PASTED not in str(texts)
        assert (await _last_run(w)).status == repo.FINISHED

        SCRIPT.reset(say("sure"))
        await w.say(ALICE, DM, "Tell me about Project Nightjar")
        assert SCRIPT.requests == [], "a blocked message never reaches the model"
        assert (await _last_run(w)).status == repo.GUARDRAIL_BLOCKED
        assert "I stopped: your message contains a term this agent's guardrails block." in chat_text(w)


async def test_the_answer_is_shown_redacted_and_a_blocked_answer_is_never_shown(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": _agent(redact_secrets_out=True,
                                                           blocked_keywords_out="nightjar")}) as w:
        shown = _record_chat(w)
        SCRIPT.reset(say(f"Your key is {PASTED}. " + "More words follow here. " * 40))
        await w.say(ALICE, DM, "what is my key?")
        assert shown and all(PASTED not in text for text in shown)
        assert "Your key is [redacted:anthropic_key]." in chat_text(w)
        run = await _last_run(w)
        assert run.status == repo.FINISHED
        assert PASTED not in " ".join(await _stored_replies(w)), "the transcript (next turn's history) is redacted too"

        shown.clear()
        SCRIPT.reset(say("The codename is NIGHTJAR, do not tell anyone."))
        await w.say(ALICE, DM, "what is the codename?")
        assert all("NIGHTJAR" not in text for text in shown)
        assert (await _last_run(w)).status == repo.GUARDRAIL_BLOCKED
        assert "I stopped: my answer contains a term this agent's guardrails block." in chat_text(w)


async def test_enabled_with_no_edge_attaches_nothing(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": _agent()}) as w:
        turn = await w.turn(ALICE, DM, "hi")
    decl = load_all()["guardrails"]
    config = decl.config_model.model_validate({})
    assert decl.build(BuildContext(turn, turn.agent.capabilities[0], config, None)) is None
    assert REGISTRY["guardrails"].tools == ()


def test_bad_config_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    extensions.register_checks()
    cfg = write_config(tmp_path)
    path = cfg / "agents" / "assistant.yaml"
    path.write_text("name: A\nmodel: demo\ncapabilities:\n  - id: guardrails\n    config:\n"
                    "      redact_secrets_input: true\n      blocked_keywords_tool: ' , '\n      redact_pii_out: maybe\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    problems = sorted(str(p) for p in e.value.problems if not p.warning)
    assert problems == sorted([
        f"{path}:6:7: capabilities.0.config.redact_secrets_input: Extra inputs are not permitted",
        f"{path}:7:7: capabilities.0.config.blocked_keywords_tool: holds separators and no term; leave it empty "
        "to block nothing",
        f"{path}:8:7: capabilities.0.config.redact_pii_out: Input should be a valid boolean, unable to interpret input",
    ])


async def test_a_redacted_dm_with_a_shared_file_answers_and_the_file_reaches_the_model_as_it_is(tmp_path: Path) -> None:
    """The harness refuses to redact a prompt that carries files (a UserError: "Something went wrong"); here the
    person's words are redacted and the files are data. See docs/security.md, "Attachments and stored history"."""
    import aiohttp
    from pydantic_ai.messages import BinaryContent

    from gateway.runs.llm import register_model
    from tests.support.files_model import PNG, Recorder

    from ..conftest import running_gateway, wait_for

    recorder = Recorder()
    register_model("guarded-files", recorder.model)
    spec = {"name": "Guarded", "model": "guarded-files",
            "capabilities": [{"id": "guardrails", "config": {"redact_pii_in": True}}]}
    config = write_config(tmp_path / "config", agents={"assistant": spec})
    table = b"name,email\nada,ada@example.org\n"
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        form = aiohttp.FormData()
        form.add_field("text", "mail bob.smith@example.com about this")
        form.add_field("file", table, filename="people.csv", content_type="text/csv")
        form.add_field("file", PNG, filename="chart.png", content_type="image/png")
        r = await s.post(f"/api/v1/conversations/{conv}/messages", data=form)
        assert r.status == 202, await r.text()
        run_id = (await r.json())["run_id"]

        async def ended() -> bool:
            run = await gw.store.run(run_id)
            return run is not None and run.status in repo.ENDED

        await wait_for(ended, what="the guarded run to end")
        messages = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        [answer] = [m["text"] for m in messages if m["role"] == "assistant"]
        assert answer == "Got it.", answer  # not "Something went wrong while answering (UserError)"
        words, csv, image = recorder.last_prompt()
        assert "bob.smith@example.com" not in words and words.startswith("mail "), words
        assert "ada@example.org" in csv, "a shared file is data: passed as it is"
        assert isinstance(image, BinaryContent) and image.data == PNG
