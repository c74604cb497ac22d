"""Outcomes as each provider's own tool-result messages (issue 40, item 2), checked against the
SDKs' own types as ``tests/unit/test_offer.py`` checks the offered tools: openai's and
anthropic's TypedDicts (with no key outside them), google-genai's pydantic models, botocore's
parameter validation of a Converse request."""

from __future__ import annotations

import copy
import typing
from typing import Any

import botocore.session
import pytest
from anthropic.types import MessageParam, ToolResultBlockParam
from anthropic.types.user_message_param import UserMessageParam
from botocore.validate import validate_parameters
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolMessageParam
from openai.types.responses import ResponseInputParam
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import TypeAdapter

from processor.agent.messages import PROVIDERS, outcome_text, tool_results
from processor.agent.outcomes import Outcome, OutcomeKind
from processor.core.errors import ConfigurationError
from processor.core.events import CallKey

SECRET = "4111-1111-1111-1111"  # an argument value: it must never reach a message


def key(call_id: str, item: str = "0") -> CallKey:
    return CallKey(tenant="acme", turn_id="t-1", response_id="r-1", item_id=item, call_id=call_id)


OUTCOMES = [
    Outcome(key("c-ran"), OutcomeKind.RAN, "dispatched", "get_weather", output={"temp_c": 18}),
    Outcome(key("c-empty"), OutcomeKind.RAN, "dispatched", "get_weather"),
    Outcome(key("c-failed"), OutcomeKind.FAILED, "dispatched", "pay", reason="card_declined",
            detail=f"card {SECRET}"),
    Outcome(key("c-confirm"), OutcomeKind.REFUSED, "dispatched", "pay",
            reason="confirmation_missing"),
    Outcome(key("c-disabled"), OutcomeKind.REFUSED, "dispatched", "pay", reason="tool_disabled",
            blocked_by="cmd-1"),
    Outcome(key("c-unknown"), OutcomeKind.UNKNOWN, "dispatched", "pay", reason="executor_stopped"),
    Outcome(key("c-stopped"), OutcomeKind.CANCELLED, "preparing", "pay", reason="user_stop"),
    Outcome(key("c-voided"), OutcomeKind.VOIDED, "preparing", "pay", reason="response_failed",
            provider_reason="content_filter"),
    Outcome(key("c-invalid"), OutcomeKind.REJECTED, "preparing", "pay", reason="schema_invalid"),
    Outcome(key("c-open"), OutcomeKind.OPEN, "dispatched", "pay"),
]  # fmt: skip
NOT_RAN = [o.key.call_id for o in OUTCOMES if o.kind is not OutcomeKind.RAN]


def _exact(typed_dict: Any, value: Any) -> None:
    """``value`` validates as ``typed_dict`` and has no key the TypedDict does not declare."""
    TypeAdapter(typed_dict).validate_python(value)
    allowed = set(typing.get_type_hints(typed_dict))
    assert set(value) <= allowed, set(value) - allowed


def _texts(value: Any) -> str:
    return repr(value)


# ------------------------------------------------------------------------ SDK types


def test_openai_responses_function_call_outputs_are_the_sdks_type() -> None:
    items = tool_results(OUTCOMES, "openai-responses")
    for item in items:
        _exact(FunctionCallOutput, item)
    TypeAdapter(ResponseInputParam).validate_python(items)
    assert [i["call_id"] for i in items] == [o.key.call_id for o in OUTCOMES]
    assert items[0]["output"] == '{"temp_c":18}'
    assert all("namespace" not in i for i in items)  # bare tools name none


def test_chat_completions_tool_messages_are_the_sdks_type() -> None:
    messages = tool_results(OUTCOMES, "openai-chat")
    for message in messages:
        _exact(ChatCompletionToolMessageParam, message)
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)
    assert [m["tool_call_id"] for m in messages] == [o.key.call_id for o in OUTCOMES]


def test_anthropic_tool_results_are_the_sdks_type_and_flag_what_did_not_run() -> None:
    [message] = tool_results(OUTCOMES, "anthropic")
    TypeAdapter(MessageParam).validate_python(message)
    _exact(UserMessageParam, message)
    assert message["role"] == "user"
    for block in message["content"]:
        _exact(ToolResultBlockParam, block)
    errors = [b["tool_use_id"] for b in message["content"] if b["is_error"]]
    assert errors == NOT_RAN


def test_gemini_function_responses_are_the_sdks_type() -> None:
    [content] = tool_results(OUTCOMES, "gemini")
    parsed = genai_types.Content.model_validate(content)
    assert parsed.role == "user"
    responses = [p.function_response for p in parsed.parts or ()]
    assert all(r is not None for r in responses)
    assert [r.id for r in responses if r] == [o.key.call_id for o in OUTCOMES]
    assert [r.name for r in responses if r][:3] == ["get_weather", "get_weather", "pay"]
    ran, empty, failed, *_ = [r.response for r in responses if r]
    assert ran == {"output": {"temp_c": 18}} and empty == {"output": {}}
    assert failed is not None and set(failed) == {"error"}
    with pytest.raises(ValueError, match="extra"):  # the check is a real one
        genai_types.Content.model_validate({**content, "nonsense": 1})


def test_bedrock_tool_results_pass_botocores_parameter_validation() -> None:
    [message] = tool_results(OUTCOMES, "bedrock")
    shape = (
        botocore.session.get_session()
        .get_service_model("bedrock-runtime")
        .operation_model("Converse")
        .input_shape
    )
    asked = {
        "role": "assistant",
        "content": [
            {"toolUse": {"toolUseId": o.key.call_id, "name": o.tool, "input": {}}} for o in OUTCOMES
        ],
    }
    params = {
        "modelId": "m",
        "messages": [{"role": "user", "content": [{"text": "hi"}]}, asked, message],
    }
    validate_parameters(params, shape)
    statuses = {b["toolResult"]["toolUseId"]: b["toolResult"]["status"] for b in message["content"]}
    assert [c for c, s in statuses.items() if s == "error"] == NOT_RAN
    assert message["content"][0]["toolResult"]["content"] == [{"json": {"temp_c": 18}}]
    bad = copy.deepcopy(params)
    del bad["messages"][2]["content"][0]["toolResult"]["toolUseId"]
    with pytest.raises(Exception, match="toolUseId"):
        validate_parameters(bad, shape)  # the check is a real one


# ------------------------------------------------------------------------ truthful text


def test_what_did_not_run_is_told_truthfully_and_carries_no_argument_value() -> None:
    text = {o.key.call_id: outcome_text(o) for o in OUTCOMES}
    assert text["c-ran"] == '{"temp_c":18}'
    assert "card_declined" in text["c-failed"] and "ran" in text["c-failed"]
    assert "confirm" in text["c-confirm"] and text["c-confirm"].startswith("Not run")
    assert "for now" in text["c-disabled"]  # the user can lift it: said so
    assert "may have acted" in text["c-unknown"] and "Do not repeat" in text["c-unknown"]
    assert text["c-stopped"].startswith("Not run (user_stop)")
    assert "content_filter" in text["c-voided"] and text["c-voided"].startswith("Not run")
    assert text["c-open"].startswith("Pending")
    for provider in PROVIDERS:
        rendered = _texts(tool_results(OUTCOMES, provider))
        assert SECRET not in rendered and "cmd-1" not in rendered


def test_a_call_stopped_while_it_ran_is_told_as_stopped_not_as_run() -> None:
    stopped = Outcome(
        key("c-x"), OutcomeKind.FAILED, "dispatched", "pay", reason="cancelled_while_running"
    )
    text = outcome_text(stopped)
    assert text.startswith("Stopped (cancelled_while_running)")
    assert "without completing" in text and "reported a failure" not in text


def test_free_text_in_a_reason_is_never_repeated() -> None:
    odd = Outcome(key("c-x"), OutcomeKind.FAILED, "dispatched", "pay", reason=f"bad {SECRET}")
    assert SECRET not in outcome_text(odd) and "(other)" in outcome_text(odd)


# ------------------------------------------------------------------------ names


def test_a_namespaced_call_is_answered_by_the_name_it_was_offered_and_called() -> None:
    booked = Outcome(key("c-1"), OutcomeKind.RAN, "dispatched", "book_slot", "bookings",
                     output={"ref": "B-1"})  # fmt: skip
    [content] = tool_results([booked], "gemini")
    assert content["parts"][0]["functionResponse"]["name"] == "bookings__book_slot"
    called = Outcome(key("c-2"), OutcomeKind.RAN, "dispatched", "book_slot", "bookings",
                     called_as="BookSlot")  # fmt: skip
    [content] = tool_results([called], "gemini")
    assert content["parts"][0]["functionResponse"]["name"] == "BookSlot"  # as the model said
    in_namespace = Outcome(key("c-3"), OutcomeKind.RAN, "dispatched", "book_slot", "bookings",
                           called_as="book_slot", called_namespace="bookings")  # fmt: skip
    [item] = tool_results([in_namespace], "openai-responses")
    _exact(FunctionCallOutput, item)
    assert (item["namespace"], item["name"], item["call_id"]) == ("bookings", "book_slot", "c-3")


def test_gemini_answers_with_the_providers_own_id_only() -> None:
    made_up = Outcome(key("r-1:0"), OutcomeKind.RAN, "dispatched", "get_weather")
    [content] = tool_results([made_up], "gemini")
    assert "id" not in content["parts"][0]["functionResponse"]


def test_an_unknown_provider_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown_provider"):
        tool_results(OUTCOMES, "cohere")
