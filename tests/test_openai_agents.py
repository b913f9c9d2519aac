"""``mneme_client.openai_agents`` (issue 47): an OpenAI Agents SDK ``Agent`` run by a
``Model`` written here (no network) that calls Mneme's tools, and ``MnemeSession``
answering as the SDK's own ``SQLiteSession`` does, against a running ``mneme serve``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, ModelSettings, Runner, SQLiteSession, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.models.interface import Model
from agents.usage import Usage
from mneme_client import Mneme
from mneme_client.openai_agents import MnemeSession, mneme_tools
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY, new_store

pytestmark = pytest.mark.slow
set_tracing_disabled(True)  # nothing leaves this machine (the SDK would try OpenAI's)


@pytest.fixture(scope="module")
def server(mneme_serve: Server) -> Server:
    return mneme_serve


def said(text: str) -> ResponseOutputMessage:
    part = ResponseOutputText(annotations=[], text=text, type="output_text")
    return ResponseOutputMessage.model_validate(
        {"id": "msg", "content": [part], "role": "assistant", "status": "completed",
         "type": "message"}
    )  # fmt: skip


OUTPUT = "function_call_output"


class ScriptedModel(Model):
    """Calls ``calls`` one turn each, then says the last tool output; records each
    turn's input."""

    def __init__(self, *calls: tuple[str, str]) -> None:
        self.calls = list(calls)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        self.inputs.append(input)
        items = input if isinstance(input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == OUTPUT]
        done = len([o for o in outputs if o["call_id"].startswith("turn")])
        if done < len(self.calls):
            name, arguments = self.calls[done]
            call = ResponseFunctionToolCall(arguments=arguments, call_id=f"turn{done}", name=name,
                                            type="function_call", id=f"fc{done}")  # fmt: skip
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        last = str(outputs[-1]["output"]) if outputs else "nothing to say"
        return ModelResponse(output=[said(last)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


async def test_an_agent_calls_remember_then_recall(server: Server) -> None:
    store = new_store(server.base, "oa")
    model = ScriptedModel(
        ("remember", '{"text": "Alice drinks oolong tea every morning."}'),
        ("recall", '{"query": "What does Alice drink?"}'),
    )
    agent = Agent(name="memory", model=model, tools=mneme_tools(store, api_key=BOOTSTRAP_KEY,
                  base_url=server.base), model_settings=ModelSettings())  # fmt: skip
    result = await Runner.run(agent, "Remember what Alice drinks, then check.")
    assert "oolong" in result.final_output
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as mneme:
        [hit] = mneme.search(store, "oolong tea", 5)
    assert hit.content == "Alice drinks oolong tea every morning."


def message(role: str, text: str) -> TResponseInputItem:
    return {"role": role, "content": text}  # type: ignore[return-value, misc]


async def test_the_session_answers_as_the_sdks_sqlite_session(server: Server) -> None:
    store = new_store(server.base, "oa")
    ours = MnemeSession("conv-1", store, api_key=BOOTSTRAP_KEY, base_url=server.base)
    other = MnemeSession("conv-2", store, api_key=BOOTSTRAP_KEY, base_url=server.base)
    theirs = SQLiteSession("conv-1")
    first = [message("user", "Hello"), message("assistant", "Hi! How can I help?")]
    second = [message("user", "What is 2 + 2?"), message("assistant", "4")]
    for session in (ours, theirs):
        assert await session.get_items() == []
        await session.add_items(first)
        await session.add_items(second)
    await other.add_items([message("user", "another conversation")])
    for limit in (None, 1, 3, 10, 0):
        assert await ours.get_items(limit) == await theirs.get_items(limit), limit
    assert await ours.pop_item() == await theirs.pop_item() == second[-1]
    assert await ours.get_items() == await theirs.get_items()
    await ours.add_items([message("assistant", "Four.")])
    await theirs.add_items([message("assistant", "Four.")])
    assert await ours.get_items() == await theirs.get_items()
    for session in (ours, theirs):
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None
    assert await other.get_items() == [message("user", "another conversation")]


async def test_a_run_with_the_session_sees_the_earlier_turns(server: Server) -> None:
    store = new_store(server.base, "oa")
    session = MnemeSession("chat", store, api_key=BOOTSTRAP_KEY, base_url=server.base)
    model = ScriptedModel()
    agent = Agent(name="chat", model=model)
    await Runner.run(agent, "My name is Alice.", session=session)
    again = MnemeSession("chat", store, api_key=BOOTSTRAP_KEY, base_url=server.base)
    await Runner.run(agent, "What is my name?", session=again)  # a new process would too
    second_input = model.inputs[-1]
    texts = [i.get("content") for i in second_input if isinstance(i, dict)]
    assert "My name is Alice." in str(texts) and "What is my name?" in str(texts)
    assert len(await again.get_items()) == 4  # two user turns, two answers
