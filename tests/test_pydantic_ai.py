"""``mneme_client.pydantic_ai.mneme_toolset`` (issue 47): a Pydantic AI ``Agent`` driven by
the framework's own ``FunctionModel`` and ``TestModel``, making real tool calls into a
running ``mneme serve``."""

from __future__ import annotations

from typing import Any

import pytest
from mneme_client import Mneme
from mneme_client.pydantic_ai import mneme_toolset
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY, new_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(mneme_serve: Server) -> Server:
    return mneme_serve


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def scripted(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """A model that makes ``calls`` one turn each, then answers with the last result."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = len(returns(messages))
        if done < len(calls):
            name, args = calls[done]
            return ModelResponse(parts=[ToolCallPart(name, args)])
        return ModelResponse(parts=[TextPart(str(returns(messages)[-1].content))])

    return FunctionModel(respond)


async def test_an_agent_remembers_then_recalls(server: Server) -> None:
    store = new_store(server.base, "pai")
    toolset = mneme_toolset(store, api_key=BOOTSTRAP_KEY, base_url=server.base)
    model = scripted(
        ("remember", {"text": "Alice drinks oolong tea every morning."}),
        ("recall", {"query": "What does Alice drink?"}),
    )
    result = await Agent(model, toolsets=[toolset]).run("Remember what Alice drinks, then check.")
    assert "oolong" in result.output
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as mneme:
        [hit] = mneme.search(store, "oolong tea", 5)
    assert hit.content == "Alice drinks oolong tea every morning."


async def test_the_files_tools_and_a_fixable_refusal(server: Server) -> None:
    store = new_store(server.base, "pai")
    toolset = mneme_toolset(store, api_key=BOOTSTRAP_KEY, base_url=server.base, files=True)
    model = scripted(
        ("read_file", {"path": "notes/alice.md"}),  # not there yet: back to the model
        ("write_file", {"path": "notes/alice.md", "content": "Alice: oolong"}),
        ("write_file", {"path": "notes/alice.md", "content": "Alice: sencha"}),
        ("list_files", {}),
        ("read_file", {"path": "notes/alice.md"}),
    )
    result = await Agent(model, toolsets=[toolset]).run("Keep notes on Alice.")
    assert result.output == "Alice: sencha"
    retried = [r for r in returns(result.all_messages()) if r.outcome == "retried"]
    assert len(retried) == 1 and "No file at" in str(retried[0].content)
    listed = [r.content for r in returns(result.all_messages()) if r.tool_name == "list_files"]
    assert listed == [["notes/alice.md"]]


async def test_pydantic_ais_test_model_calls_the_tools(server: Server) -> None:
    store = new_store(server.base, "pai")
    toolset = mneme_toolset(store, api_key=BOOTSTRAP_KEY, base_url=server.base)
    agent = Agent(TestModel(call_tools=["remember", "recall"]), toolsets=[toolset])
    result = await agent.run("Use your memory.")
    called = {r.tool_name for r in returns(result.all_messages())}
    assert called == {"remember", "recall"}
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as mneme:
        assert len(list(mneme.browse(store=store))) == 1  # TestModel's one remember
