"""Issue 15 end to end: provider streams written from each provider's documentation → adapter →
the real Assembler. A call acts only if its response completed normally; alternatives of one
request never both act; unknown event types lose no valid call.

Each stream is asserted by what is dispatched and by what the ledger records (state, terminal
reason, the provider's reason), so a voided call is visibly voided, not merely missing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import pytest

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.gemini import GeminiAdapter
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.core.assembler import Assembler
from processor.core.events import CallStarted, Dispatch, FragmentEvent, Ledger, TurnStarted
from processor.core.registry import Registry
from tests.adapters import test_anthropic as anthropic
from tests.adapters import test_bedrock as bedrock
from tests.adapters import test_gemini as gemini
from tests.adapters import test_openai_chat as chat
from tests.adapters import test_openai_responses as responses
from tests.adapters.harness import CTX, run_adapter


def pipeline(adapter: StreamAdapter, stream: Iterable[Any]) -> tuple[list[Dispatch], list[Ledger]]:
    """The stream through the adapter and the real Assembler: (dispatches, ledger records)."""
    events: list[FragmentEvent] = run_adapter(adapter, stream)
    tools = sorted({e.tool for e in events if isinstance(e, CallStarted)})
    registry = Registry.from_document(
        {"tools": [{"name": name, "parameters": {"type": "object"}} for name in tools]}
    )
    assembler = Assembler(registry)
    bind = TurnStarted(command_id="bind", issued_by="gateway", issued_at=0.0,
                       tenant=CTX.tenant, turn_id=CTX.turn_id, actor=CTX.actor)  # fmt: skip
    outputs = assembler.handle(bind, 0.0)
    for event in events:
        outputs += assembler.handle(event, 0.0)
    return (
        [o for o in outputs if isinstance(o, Dispatch)],
        [o for o in outputs if isinstance(o, Ledger)],
    )


def voided(ledger: list[Ledger]) -> list[tuple[str, str | None, str | None]]:
    """``(call_id, terminal_reason, provider_reason)`` of every call that did not act."""
    return [(e.call_id, e.terminal_reason, e.provider_reason) for e in ledger
            if e.state != "dispatched"]  # fmt: skip


# --------------------------------------------------------------------------- Anthropic


@pytest.mark.parametrize(
    ("stop_reason", "terminal_reason"),
    [("refusal", "response_failed"), ("max_tokens", "incomplete")],
)
def test_anthropic_stopped_tool_use_then_refusal_or_max_tokens_never_dispatches(
    stop_reason: str, terminal_reason: str
) -> None:
    a = anthropic
    stream = [a.start(), a.tool_start(0, "toolu_a", "transfer"), a.part(0, '{"amount": 10}'),
              a.stop(0), a.message_delta(stop_reason), a.MESSAGE_STOP]  # fmt: skip
    dispatches, ledger = pipeline(AnthropicMessagesAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("toolu_a", terminal_reason, stop_reason)]


def test_anthropic_unknown_event_type_loses_no_valid_call() -> None:
    a = anthropic
    stream = [a.start(), a.tool_start(0, "toolu_a", "lookup"), a.part(0, '{"q":'),
              {"type": "brand_new_event", "data": {}}, a.part(0, "1}"), a.stop(0),
              a.message_delta("tool_use"), a.MESSAGE_STOP]  # fmt: skip
    dispatches, _ = pipeline(AnthropicMessagesAdapter(CTX), stream)
    assert [(d.call_id, d.arguments) for d in dispatches] == [("toolu_a", {"q": 1})]


# --------------------------------------------------------------------------- OpenAI Responses


def test_responses_arguments_done_then_incomplete_content_filter_never_dispatches() -> None:
    r = responses
    stream = r.one_call(r.delta("fc_1", 0, '{"q":1}'), r.args_done("fc_1", 0, '{"q":1}'),
                        r.item_done("fc_1", "call_1", "lookup", 0, '{"q":1}', "incomplete"),
                        r.incomplete("content_filter"), end=False)  # fmt: skip
    dispatches, ledger = pipeline(OpenAIResponsesAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("call_1", "response_failed", "content_filter")]


def test_responses_two_finals_that_disagree_never_dispatch() -> None:
    r = responses
    stream = r.one_call(r.delta("fc_1", 0, '{"to":"alice"}'),
                        r.args_done("fc_1", 0, '{"to":"alice"}'),
                        r.item_done("fc_1", "call_1", "lookup", 0, '{"to":"mallory"}'))  # fmt: skip
    dispatches, ledger = pipeline(OpenAIResponsesAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("call_1", "response_failed", "arguments_mismatch")]


# --------------------------------------------------------------------------- Gemini


@pytest.mark.parametrize("finish", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"])
def test_gemini_whole_call_in_a_malformed_or_unexpected_chunk_never_dispatches(
    finish: str,
) -> None:
    stream = [gemini.chunk(gemini.fc(name="transfer", args={"amount": 10}), finish=finish)]
    dispatches, ledger = pipeline(GeminiAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("r1:0", "response_failed", finish)]


def test_gemini_whole_call_then_a_safety_chunk_never_dispatches() -> None:
    stream = [gemini.chunk(gemini.fc(name="transfer", args={"amount": 10})),
              gemini.chunk(finish="SAFETY")]  # fmt: skip
    dispatches, ledger = pipeline(GeminiAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("r1:0", "response_failed", "SAFETY")]


def _two_candidates() -> dict[str, Any]:
    first = gemini.chunk(gemini.fc(name="transfer", args={"to": "alice"}), finish="STOP")
    other = copy.deepcopy(first["candidates"][0])
    other["index"] = 1
    other["content"]["parts"] = [gemini.fc(name="transfer", args={"to": "bob"})]
    first["candidates"].append(other)
    return first


@pytest.mark.parametrize(("alternative", "acting"), [(0, "alice"), (1, "bob"), (None, None)])
def test_gemini_candidates_at_most_one_acts_and_the_others_are_recorded(
    alternative: int | None, acting: str | None
) -> None:
    dispatches, ledger = pipeline(GeminiAdapter(CTX, alternative=alternative), [_two_candidates()])
    assert [d.arguments["to"] for d in dispatches] == ([acting] if acting else [])
    assert len(voided(ledger)) == (1 if acting else 2)
    assert {e.terminal_reason for e in ledger if e.state != "dispatched"} == {
        "alternative_not_chosen"
    }


# --------------------------------------------------------------------------- Chat Completions


def _two_choices() -> list[dict[str, Any]]:
    return [
        chat.chunk(chat.tc(0, id="call_a", name="transfer", args='{"to":"alice"}'), choice=0),
        chat.chunk(chat.tc(0, id="call_b", name="transfer", args='{"to":"bob"}'), choice=1),
        chat.chunk(finish="tool_calls", choice=0),
        chat.chunk(finish="tool_calls", choice=1),
    ]


@pytest.mark.parametrize(("alternative", "acting"), [(0, "alice"), (1, "bob"), (None, None)])
def test_chat_n2_at_most_one_alternative_acts_and_the_others_are_recorded(
    alternative: int | None, acting: str | None
) -> None:
    dispatches, ledger = pipeline(OpenAIChatAdapter(CTX, alternative=alternative), _two_choices())
    assert [d.arguments["to"] for d in dispatches] == ([acting] if acting else [])
    not_chosen = [(e.response_id, e.terminal_reason) for e in ledger if e.state != "dispatched"]
    assert [reason for _, reason in not_chosen] == ["alternative_not_chosen"] * (1 if acting else 2)
    assert all("~alt" in rid for rid, _ in not_chosen)


@pytest.mark.parametrize(("finish", "reason"), [("length", "incomplete"),
                                                ("content_filter", "response_failed")])  # fmt: skip
def test_chat_voiding_finish_reason_never_dispatches(finish: str, reason: str) -> None:
    stream = [chat.chunk(chat.tc(0, id="call_a", name="transfer", args='{"to":"alice"}')),
              chat.chunk(finish=finish)]  # fmt: skip
    dispatches, ledger = pipeline(OpenAIChatAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("call_a", reason, finish)]


# --------------------------------------------------------------------------- Bedrock


def test_bedrock_ended_call_then_guardrail_never_dispatches() -> None:
    b = bedrock
    stream = [b.message_start(), b.block_start(0, "transfer", "tu-1"), b.tool_input(0, '{"a":1}'),
              b.block_stop(0), b.block_start(1, "lookup", "tu-2"), b.tool_input(1, "{}"),
              b.block_stop(1), b.message_stop("guardrail_intervened")]  # fmt: skip
    dispatches, ledger = pipeline(BedrockConverseAdapter(CTX), stream)
    assert dispatches == []
    assert sorted(voided(ledger)) == [
        ("tu-1", "response_failed", "guardrail_intervened"),
        ("tu-2", "response_failed", "guardrail_intervened"),
    ]


# --------------------------------------------------------------------------- every provider


NORMAL_STREAMS: list[tuple[str, type[StreamAdapter], list[Any]]] = [
    ("anthropic", AnthropicMessagesAdapter,
     [anthropic.start(), anthropic.tool_start(0, "toolu_a", "lookup"), anthropic.part(0, "{}"),
      anthropic.stop(0), anthropic.message_delta("tool_use"), anthropic.MESSAGE_STOP]),
    ("responses", OpenAIResponsesAdapter,
     responses.one_call(responses.delta("fc_1", 0, "{}"), responses.args_done("fc_1", 0, "{}"))),
    ("chat", OpenAIChatAdapter,
     [chat.chunk(chat.tc(0, id="call_a", name="lookup", args="{}")), chat.chunk(finish="stop")]),
    ("gemini", GeminiAdapter, [gemini.chunk(gemini.fc(name="lookup", args={}), finish="STOP")]),
    ("bedrock", BedrockConverseAdapter, bedrock.one_call("{}")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "cls", "stream"), NORMAL_STREAMS, ids=[n for n, _, _ in NORMAL_STREAMS]
)
def test_every_provider_dispatches_only_after_its_normal_end_event(
    name: str, cls: type[StreamAdapter], stream: list[Any]
) -> None:
    """The whole stream dispatches once; the same stream without its last event (the provider's
    end event) dispatches nothing."""
    dispatches, _ = pipeline(cls(CTX), copy.deepcopy(stream))
    assert len(dispatches) == 1
    cut, _ = pipeline(cls(CTX), copy.deepcopy(stream[:-1]))
    assert cut == []


# --------------------------------------------------------------------------- issue 29


def test_chat_azure_async_filter_after_tool_calls_never_dispatches() -> None:
    """Azure OpenAI's asynchronous filter: its verdict follows ``finish_reason: "tool_calls"``
    and precedes ``[DONE]`` (the end of the stream). The call is voided, visibly."""
    stream = [chat.chunk(chat.tc(0, id="call_a", name="transfer", args='{"amount": 10}')),
              chat.chunk(finish="tool_calls"),
              chat.azure_annotation({"violence": {"filtered": True, "severity": "high"}},
                                    finish="content_filter")]  # fmt: skip
    dispatches, ledger = pipeline(OpenAIChatAdapter(CTX), stream)
    assert dispatches == []
    assert voided(ledger) == [("call_a", "response_failed", "content_filter")]


@pytest.mark.parametrize(
    "exception",
    [
        "serviceUnavailableException",
        "internalServerException",
        "modelStreamErrorException",
        "throttlingException",
        "validationException",
    ],
)
@pytest.mark.parametrize("after_metadata", [False, True], ids=["instead-of-metadata", "after"])
def test_bedrock_exception_after_message_stop_never_dispatches(
    exception: str, after_metadata: bool
) -> None:
    """After ``messageStop`` the stream can end with an exception event instead of (or after)
    ``metadata``; the gateway's retry would run the call a second time."""
    stream = bedrock.one_call('{"amount": 10}')
    if not after_metadata:
        stream = stream[:-1]
    stream.append({exception: {"message": "x"}})
    dispatches, ledger = pipeline(BedrockConverseAdapter(CTX), stream)
    assert dispatches == []
    assert [(c, p) for c, _, p in voided(ledger)] == [("tu-1", exception)]


def test_bedrock_server_tool_use_never_reaches_dispatch() -> None:
    """A ``toolUse`` start with ``type: "server_tool_use"`` is a system tool Bedrock runs
    itself (answered by a ``toolResult`` block); the client tool of the same name must not run."""
    b = bedrock
    server = {"contentBlockStart": {"contentBlockIndex": 0, "start": {"toolUse": {
        "toolUseId": "tu-s", "name": "transfer", "type": "server_tool_use"}}}}  # fmt: skip
    result = {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolResult": {
        "toolUseId": "tu-s", "type": "server_tool_use", "status": "success"}}}}  # fmt: skip
    result_delta = {"contentBlockDelta": {"contentBlockIndex": 1,
                                          "delta": {"toolResult": [{"text": "done"}]}}}  # fmt: skip
    stream = [b.message_start(), server, b.tool_input(0, '{"amount": 10}'), b.block_stop(0),
              result, result_delta, b.block_stop(1),
              b.block_start(2, "lookup", "tu-c"), b.tool_input(2, "{}"), b.block_stop(2),
              b.message_stop("tool_use"), b.METADATA]  # fmt: skip
    adapter = BedrockConverseAdapter(CTX)
    dispatches, ledger = pipeline(adapter, stream)
    assert [(d.tool, d.call_id) for d in dispatches] == [("lookup", "tu-c")]
    assert [e.call_id for e in ledger] == ["tu-c"]
    assert "provider-side tool block (toolUse with a type) not dispatched" in adapter.anomalies


def test_chat_legacy_function_call_dispatches_once_with_a_ledger_entry() -> None:
    stream = [chat.legacy({"name": "lookup", "arguments": ""}), chat.legacy({"arguments": "{}"}),
              chat.legacy(finish="function_call")]  # fmt: skip
    dispatches, ledger = pipeline(OpenAIChatAdapter(CTX), stream)
    assert [(d.tool, d.call_id) for d in dispatches] == [("lookup", "synthetic:0:function_call")]
    assert [e.state for e in ledger] == ["dispatched"]


def _anthropic_block(kind: str, **block: Any) -> list[Any]:
    a = anthropic
    return [a.start(), a.block_start(0, kind, **block), a.part(0, '{"amount": 10}'), a.stop(0),
            a.message_delta("end_turn"), a.MESSAGE_STOP]  # fmt: skip


def _responses_item(item: dict[str, Any], *events: dict[str, Any]) -> list[Any]:
    r = responses
    added = {"type": "response.output_item.added", "output_index": 0, "item": item}
    done = {"type": "response.output_item.done", "output_index": 0,
            "item": {**item, "status": "completed"}}  # fmt: skip
    return r.numbered(r.created(), added, *events, done, r.completed())


_MCP = {"type": "mcp_call", "id": "mcp_1", "name": "transfer", "server_label": "bank",
        "arguments": '{"amount": 10}'}  # fmt: skip
_MCP_DELTA = {"type": "response.mcp_call_arguments.delta", "item_id": "mcp_1", "output_index": 0,
              "delta": '{"amount": 10}'}  # fmt: skip
PROVIDER_SIDE: list[tuple[str, type[StreamAdapter], list[Any]]] = [
    ("anthropic-server_tool_use", AnthropicMessagesAdapter,
     _anthropic_block("server_tool_use", id="srvtoolu_1", name="transfer", input={})),
    ("anthropic-mcp_tool_use", AnthropicMessagesAdapter,
     _anthropic_block("mcp_tool_use", id="mcptoolu_1", name="transfer", server_name="bank",
                      input={})),
    ("anthropic-unknown-block", AnthropicMessagesAdapter,
     _anthropic_block("brand_new_tool_use", id="x_1", name="transfer", input={})),
    ("responses-mcp_call", OpenAIResponsesAdapter, _responses_item(_MCP, _MCP_DELTA)),
    ("responses-web_search_call", OpenAIResponsesAdapter,
     _responses_item({"type": "web_search_call", "id": "ws_1", "status": "in_progress"})),
    ("responses-code_interpreter_call", OpenAIResponsesAdapter,
     _responses_item({"type": "code_interpreter_call", "id": "ci_1", "code": "print(1)",
                      "container_id": "c", "status": "in_progress"})),
    ("responses-unknown-item", OpenAIResponsesAdapter,
     _responses_item({"type": "brand_new_call", "id": "b_1", "name": "transfer",
                      "call_id": "call_1", "arguments": '{"amount": 10}'})),
    ("chat-custom", OpenAIChatAdapter,
     [chat.chunk({"index": 0, "id": "call_c", "type": "custom",
                  "custom": {"name": "transfer", "input": "10"}}), chat.chunk(finish="tool_calls")]),
    ("gemini-executableCode", GeminiAdapter,
     [gemini.chunk({"executableCode": {"language": "PYTHON", "code": "transfer(10)"}},
                   finish="STOP")]),
    ("gemini-toolCall", GeminiAdapter,
     [gemini.chunk({"toolCall": {"id": "t1", "toolType": "GOOGLE_SEARCH_WEB",
                                 "args": {"q": "x"}}}, finish="STOP")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "cls", "stream"), PROVIDER_SIDE, ids=[n for n, _, _ in PROVIDER_SIDE]
)
def test_provider_side_tools_never_reach_dispatch(
    name: str, cls: type[StreamAdapter], stream: list[Any]
) -> None:
    """Issue 29 item 2, every provider: a tool the provider runs itself (or a block or item
    type the adapter does not know as a client function call) starts no call, so even a client
    tool of the same name never runs. The stream itself completes normally."""
    adapter = cls(CTX)
    events = run_adapter(adapter, copy.deepcopy(stream))
    assert not any(isinstance(e, CallStarted) for e in events)
    assert [e.status.value for e in events if e.type == "response.ended"] == ["completed"]
