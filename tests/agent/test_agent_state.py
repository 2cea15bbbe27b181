from contextfold.agent import Agent, AgentState
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit

from .agent_support import assert_valid, make_agent


def kit() -> Toolkit:
    toolkit = Toolkit()

    @toolkit.register
    def lookup(key: str) -> str:
        """Look up a value."""
        return {"alpha": "1", "beta": "2"}[key]

    return toolkit


async def test_state_round_trips_through_json_into_a_new_agent() -> None:
    first_model = ScriptedModel(
        [
            tool_reply(("TaskCreate", {"subject": "collect values"})),
            tool_reply(("lookup", {"key": "alpha"})),
            "alpha is 1",
        ]
    )
    first = make_agent(first_model, kit(), tasks_enabled=True, session_id="sess-1")
    await first.reply("What is alpha?")
    saved = first.state.model_dump_json()

    # A different process would only have the JSON.
    second_model = ScriptedModel([tool_reply(("lookup", {"key": "beta"})), "beta is 2"])
    second = Agent.from_state(
        saved,
        system_prompt="You are helpful.",
        model=second_model,
        toolkit=kit(),
    )
    assert second.session_id == "sess-1"
    assert second.engine.session_id == "sess-1"
    assert second.name == "assistant"
    assert [t.subject for t in second.tasks.all()] == ["collect values"]
    reply = await second.reply("And beta?")
    assert reply.text == "beta is 2"
    sent = second_model.requests[0].messages
    assert [m.id for m in sent[1:]] == [m.id for m in first.context] + [sent[-1].id]
    assert sent[-1].text == "And beta?"
    assert_valid(second_model)


async def test_state_holds_session_context_and_tasks() -> None:
    model = ScriptedModel(["hello"])
    agent = make_agent(model, session_id="abc")
    await agent.reply("hi")
    agent.tasks.create("remember")
    state = agent.state
    assert state.session_id == "abc"
    assert state.summary is None
    assert [m.text for m in state.context] == ["hi", "hello"]
    assert [t.subject for t in state.tasks] == ["remember"]
    restored = AgentState.model_validate_json(state.model_dump_json())
    assert restored.model_dump() == state.model_dump()


async def test_load_state_replaces_context_and_new_tasks_continue_numbering() -> None:
    source = make_agent(ScriptedModel(["a"]))
    await source.reply("q")
    source.tasks.create("one")
    source.tasks.create("two")
    target = make_agent(ScriptedModel(["b"]))
    target.load_state(source.state.model_dump_json())
    assert [m.text for m in target.context] == ["q", "a"]
    assert target.tasks.create("three").id == "3"
    assert target.session_id == source.session_id


def test_state_json_keeps_infinity_and_nan_in_message_and_state_metadata() -> None:
    from contextfold.message import Msg

    msg = Msg("user", "hi", "user", metadata={"score": float("inf"), "low": float("-inf")})
    state = AgentState(
        session_id="s", name="a", summary=msg, context=[msg], metadata={"x": float("nan")}
    )
    text = state.model_dump_json()
    restored = AgentState.model_validate_json(text)
    assert restored.context[0].metadata == {"score": float("inf"), "low": float("-inf")}
    assert restored.summary is not None
    assert restored.summary.metadata["score"] == float("inf")
    assert restored.metadata["x"] != restored.metadata["x"]  # NaN, not None
