"""The registry offered to the model, in each provider's own shape (issue 43).

Every rendering is checked against the SDK's own types (openai's and anthropic's TypedDicts,
with no key outside them; google-genai's pydantic ``Tool``; botocore's parameter validation of
Bedrock's ConverseStream ``toolConfig``), and the names round-trip: a recorded stream of each
provider, calling the tool by the name it was offered, goes through the real adapter and the
Assembler and dispatches the namespaced registry entry.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from anthropic.types import ToolParam
from botocore.validate import validate_parameters
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam, NamespaceToolParam
from openai.types.responses.namespace_tool_param import ToolFunction as NamespacedFunction
from pydantic import TypeAdapter

from processor.adapters.anthropic import AnthropicMessagesAdapter
from processor.adapters.base import StreamAdapter
from processor.adapters.bedrock import BedrockConverseAdapter
from processor.adapters.gemini import GeminiAdapter
from processor.adapters.offer import offered_name, strict_problem, tool_definitions
from processor.adapters.openai_chat import OpenAIChatAdapter
from processor.adapters.openai_responses import OpenAIResponsesAdapter
from processor.core.assembler import Assembler
from processor.core.errors import OfferError, RegistryError
from processor.core.events import Dispatch, Proposal, TurnStarted
from processor.core.flat_names import flat_name, is_provider_safe
from processor.core.registry import Registry
from tests.adapters.harness import CTX, load_events, run_adapter
from tests.adapters.responses_namespaces import stream as responses_stream

DATA = Path(__file__).resolve().parent.parent / "adapters" / "data"

STRICT_OK: dict[str, Any] = {
    "type": "object",
    "properties": {"date": {"type": "string", "format": "date"}, "party": {"type": "integer"}},
    "required": ["date", "party"],
    "additionalProperties": False,
}
LOOSE: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}}

DOC: dict[str, Any] = {
    "tools": [
        {"name": "get_weather", "description": "The weather in a city.", "parameters": LOOSE},
        {
            "name": "book_slot",
            "namespace": "bookings",
            "description": "Book a table.",
            "parameters": STRICT_OK,
        },
        {"name": "admin_reset", "parameters": {"type": "object"}, "allowed_actors": ["root"]},
        {"name": "globex_only", "parameters": {"type": "object"}, "allowed_tenants": ["globex"]},
    ]
}
PROVIDERS = ["openai-responses", "openai-chat", "anthropic", "gemini", "bedrock"]


def registry(doc: dict[str, Any] | None = None) -> Registry:
    return Registry.from_document(doc or DOC)


def render(provider: str, **kwargs: Any) -> list[dict[str, Any]]:
    return tool_definitions(registry(), provider, tenant="acme", actor="alice", **kwargs)


def _exact(typed_dict: Any, value: Any) -> None:
    """``value`` validates as ``typed_dict`` and has no key the TypedDict does not declare."""
    TypeAdapter(typed_dict).validate_python(value)
    allowed = typed_dict.__required_keys__ | typed_dict.__optional_keys__
    assert set(value) <= allowed, set(value) - allowed


# ------------------------------------------------------------------------ SDK types


def test_openai_responses_tools_are_the_sdks_types() -> None:
    tools = render("openai-responses")
    bare, namespace = tools
    _exact(FunctionToolParam, bare)
    _exact(NamespaceToolParam, namespace)
    [inner] = namespace["tools"]
    _exact(NamespacedFunction, inner)
    assert (namespace["name"], inner["name"]) == ("bookings", "book_slot")
    assert bare["name"] == "get_weather" and bare["description"] == "The weather in a city."


def test_chat_completions_tools_are_the_sdks_types() -> None:
    tools = render("openai-chat")
    for tool in tools:
        _exact(ChatCompletionFunctionToolParam, tool)
    assert [t["function"]["name"] for t in tools] == ["get_weather", "bookings__book_slot"]


def test_anthropic_tools_are_the_sdks_types() -> None:
    tools = render("anthropic")
    for tool in tools:
        _exact(ToolParam, tool)
    assert [t["name"] for t in tools] == ["get_weather", "bookings__book_slot"]
    assert tools[1]["input_schema"]["required"] == ["date", "party"]


def test_gemini_tools_are_the_sdks_types() -> None:
    [tool] = render("gemini")
    parsed = genai_types.Tool.model_validate(tool)
    names = [d.name for d in parsed.function_declarations or ()]
    assert names == ["get_weather", "bookings__book_slot"]
    book = tool["functionDeclarations"][1]["parameters"]
    assert book["type"] == "OBJECT"
    assert book["properties"]["date"] == {"type": "STRING", "description": "(format: date)"}


def test_bedrock_tools_pass_botocores_parameter_validation() -> None:
    tools = render("bedrock")
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = model.operation_model("ConverseStream").input_shape
    params = {
        "modelId": "m",
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "toolConfig": {"tools": tools},
    }
    validate_parameters(params, shape)
    bad = copy.deepcopy(params)
    bad["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] = {"schema": {}}
    with pytest.raises(Exception, match="inputSchema"):
        validate_parameters(bad, shape)  # the check is a real one


# ------------------------------------------------------------------- least privilege


def test_only_what_the_tenant_and_actor_may_call_is_offered() -> None:
    def names(tenant: str, actor: str) -> list[str]:
        tools = tool_definitions(registry(), "anthropic", tenant=tenant, actor=actor)
        return [t["name"] for t in tools]

    assert names("acme", "alice") == ["get_weather", "bookings__book_slot"]
    assert names("acme", "root") == ["get_weather", "bookings__book_slot", "admin_reset"]
    assert names("globex", "alice") == ["get_weather", "bookings__book_slot", "globex_only"]


def test_the_reviewed_description_and_schema_are_offered_unchanged() -> None:
    [tool] = [t for t in render("anthropic") if t["name"] == "bookings__book_slot"]
    assert tool["description"] == "Book a table."
    assert tool["input_schema"] == STRICT_OK


# ------------------------------------------------------------------------ strict


def test_strict_is_on_where_the_schema_allows_it_and_refused_when_asked_otherwise() -> None:
    assert [t["function"]["strict"] for t in render("openai-chat")] == [False, True]
    assert [t["function"]["strict"] for t in render("openai-chat", strict=False)] == [False, False]
    assert "strict" not in render("anthropic")[0] and render("anthropic")[1]["strict"] is True
    with pytest.raises(OfferError, match=r"get_weather.*additionalProperties"):
        render("openai-responses", strict=True)


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (STRICT_OK, None),
        ({**STRICT_OK, "required": ["date"]}, "every property must be required"),
        ({**STRICT_OK, "minProperties": 1}, "minProperties"),
        (
            {**STRICT_OK, "properties": {**STRICT_OK["properties"], "x": {"type": "object"}}},
            "parameters.properties.x: an object needs additionalProperties: false",
        ),
    ],
)
def test_strict_problem(schema: dict[str, Any], problem: str | None) -> None:
    found = strict_problem(schema)
    assert (found is None) if problem is None else (found is not None and problem in found)


# ------------------------------------------------------------------------ Gemini


@pytest.mark.parametrize(
    "keyword",
    [
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        {"exclusiveMinimum": 0},
        {"multipleOf": 2},
        {"uniqueItems": True},
        {"not": {"type": "string"}},
        {"enum": [1, 2]},
        {"type": ["string", "integer"]},
    ],
)
def test_gemini_refuses_what_would_change_meaning(keyword: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"x": keyword}}
    doc = {"tools": [{"name": "t", "parameters": schema}]}
    with pytest.raises(OfferError, match=r"parameters\.properties\.x"):
        tool_definitions(registry(doc), "gemini", tenant="acme", actor="alice")


def test_gemini_keeps_nullable_defs_and_references() -> None:
    schema = {
        "type": "object",
        "$defs": {"slot": {"type": "string", "enum": ["am", "pm"]}},
        "properties": {
            "note": {"type": ["string", "null"], "maxLength": 40},
            "slot": {"$ref": "#/$defs/slot"},
        },
    }
    doc = {"tools": [{"name": "t", "parameters": schema}]}
    [tool] = tool_definitions(registry(doc), "gemini", tenant="acme", actor="alice")
    genai_types.Tool.model_validate(tool)
    params = tool["functionDeclarations"][0]["parameters"]
    assert params["properties"]["note"] == {"type": "STRING", "nullable": True, "maxLength": 40}
    assert params["properties"]["slot"] == {"ref": "#/defs/slot"}
    assert params["defs"]["slot"] == {"type": "STRING", "enum": ["am", "pm"]}


# ------------------------------------------------------------------------ names


def test_flat_names_are_provider_safe_and_distinct() -> None:
    assert flat_name("bookings", "book_slot") == "bookings__book_slot"
    long_a, long_b = flat_name("n" * 60, "a.b"), flat_name("n" * 60, "a b")
    for name in (long_a, long_b, flat_name("café", "x"), flat_name("a/b", "ü" * 80)):
        assert is_provider_safe(name)
    assert long_a != long_b


def test_a_flattened_name_that_meets_another_name_is_refused_at_load() -> None:
    doc = {
        "tools": [
            {"name": "book_slot", "namespace": "bookings", "parameters": {"type": "object"}},
            {"name": "bookings__book_slot", "parameters": {"type": "object"}},
        ]
    }
    with pytest.raises(RegistryError, match="flattens to 'bookings__book_slot'"):
        registry(doc)


def test_a_provider_refuses_every_name_of_a_tool() -> None:
    doc = {"tools": [{"name": "book slot", "parameters": {"type": "object"}}]}
    with pytest.raises(OfferError, match="accepts none of its names"):
        tool_definitions(registry(doc), "anthropic", tenant="acme", actor="alice")
    doc["tools"][0]["aliases"] = ["book_slot"]
    [tool] = tool_definitions(registry(doc), "anthropic", tenant="acme", actor="alice")
    assert tool["name"] == "book_slot"


# (provider, recorded stream, its tool name, adapter)
RECORDED: list[tuple[str, str, str, type[StreamAdapter]]] = [
    ("openai-chat", "openai-chat/single-tool-gpt4o.sse", "GetWeatherArgs", OpenAIChatAdapter),
    ("anthropic", "anthropic/text-then-tool-use.sse", "get_weather", AnthropicMessagesAdapter),
    ("gemini", "gemini/whole-call-one-chunk.jsonl", "weather", GeminiAdapter),
    (
        "bedrock",
        "bedrock-converse/nova-text-then-tooluse.decoded.jsonl",
        "get_temperature",
        BedrockConverseAdapter,
    ),
]


def _renamed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {
            k: (new if k == "name" and v == old else _renamed(v, old, new))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return value


def _dispatched(reg: Registry, events: list[Any], adapter: StreamAdapter) -> list[Dispatch]:
    assembler = Assembler(reg)
    bind = TurnStarted(
        command_id="bind", issued_by="gateway", issued_at=0.0,
        tenant=CTX.tenant, turn_id=CTX.turn_id, actor=CTX.actor,
    )  # fmt: skip
    outputs = assembler.handle(bind, 0.0)
    for event in run_adapter(adapter, events):
        outputs += assembler.handle(event, 0.0)
    return [o for o in outputs if isinstance(o, Dispatch)]


ANY_ARGS: dict[str, Any] = {
    "tools": [
        {"name": "book_slot", "namespace": "bookings", "parameters": {"type": "object"}},
        {"name": "book_slot", "parameters": {"type": "object"}},  # a bare one of the same name
    ]
}


@pytest.mark.parametrize(("provider", "path", "recorded", "adapter"), RECORDED)
def test_an_offered_name_round_trips_to_the_namespaced_entry(
    provider: str, path: str, recorded: str, adapter: type[StreamAdapter]
) -> None:
    reg = registry(ANY_ARGS)
    offered = [t for t in tool_definitions(reg, provider, tenant="t1", actor="user-1")]
    namespaced = reg.resolve("book_slot", "bookings")
    assert namespaced is not None
    name = offered_name(namespaced.declaration, provider)
    assert name == "bookings__book_slot" and name in repr(offered)
    events = _renamed(load_events(DATA / path), recorded, name)
    [dispatch] = _dispatched(reg, events, adapter(CTX))
    assert (dispatch.namespace, dispatch.tool) == ("bookings", "book_slot")


def test_openai_responses_round_trips_by_namespace() -> None:
    reg = registry({"tools": [{**ANY_ARGS["tools"][0], "name": "transfer"}]})
    [group] = tool_definitions(reg, "openai-responses", tenant="t1", actor="user-1")
    assert (group["name"], group["tools"][0]["name"]) == ("bookings", "transfer")
    [dispatch] = _dispatched(reg, responses_stream("bookings"), OpenAIResponsesAdapter(CTX))
    assert (dispatch.namespace, dispatch.tool) == ("bookings", "transfer")


def test_an_mcp_imported_registry_is_offered_to_every_provider() -> None:
    """The registry `processor tools import-mcp` wrote for the bundled MCP server
    (deploy/mcp/tools.yaml) is offered by its reviewed text, in every provider's shape: OpenAI
    Responses by namespace, the others by flattened name."""
    from processor.registry_file import load_registry

    imported = load_registry(Path(__file__).resolve().parents[2] / "deploy" / "mcp" / "tools.yaml")
    [group] = tool_definitions(imported, "openai-responses", tenant="acme", actor="alice")
    assert group["type"] == "namespace" and group["name"] == "bookings"
    assert {t["name"] for t in group["tools"]} == {"book_slot", "list_free_slots"}
    for provider in ("openai-chat", "anthropic", "gemini", "bedrock"):
        rendered = repr(tool_definitions(imported, provider, tenant="acme", actor="alice"))
        assert "bookings__book_slot" in rendered and "bookings__list_free_slots" in rendered
    [book] = [t for t in imported.tools if t.name == "book_slot"]
    assert book.description in repr(render_for(imported, "anthropic"))


def render_for(reg: Registry, provider: str) -> list[dict[str, Any]]:
    return tool_definitions(reg, provider, tenant="acme", actor="alice")


# ------------------------------------------- the imported MCP registry, from every provider

MCP_TOOLS = Path(__file__).resolve().parents[2] / "deploy" / "mcp" / "tools.yaml"

# (provider, recorded stream, its tool name, adapter): every provider's own call shape
EVERY_PROVIDER: list[tuple[str, str, str, type[StreamAdapter]]] = [
    (
        "openai-responses",
        "openai-responses/azure-single-call.jsonl",
        "weather",
        OpenAIResponsesAdapter,
    ),
    *RECORDED,
]
# a valid call of each imported tool (the schemas `import-mcp` took from the server)
MCP_CALLS: dict[str, dict[str, Any]] = {
    "list_free_slots": {"day": "2026-12-07"},
    "book_slot": {"slot": "2026-12-07T09:00"},
}


def _argument_slot(provider: str, event: dict[str, Any]) -> tuple[dict[str, Any], str, bool] | None:
    """Where ``event`` carries the call's arguments: (holder, key, whole) — ``whole`` for a
    value that is all of them (a done event, Gemini's ``args``), else a fragment."""
    if provider == "openai-chat":
        calls = event["choices"][0]["delta"].get("tool_calls") if event.get("choices") else None
        function = calls[0].get("function", {}) if calls else {}
        return (function, "arguments", False) if "arguments" in function else None
    if provider == "anthropic":
        delta = event.get("delta", {})
        return (delta, "partial_json", False) if delta.get("type") == "input_json_delta" else None
    if provider == "gemini":
        for candidate in event.get("candidates", ()):
            for part in candidate.get("content", {}).get("parts", ()):
                if "functionCall" in part:
                    return (part["functionCall"], "args", True)
        return None
    if provider == "bedrock":
        use = event.get("contentBlockDelta", {}).get("delta", {}).get("toolUse")
        return (use, "input", False) if use is not None else None
    kind = event.get("type")
    if kind == "response.function_call_arguments.delta":
        return (event, "delta", False)
    if kind == "response.function_call_arguments.done":
        return (event, "arguments", True)
    item = event.get("item", {})
    if item.get("type") == "function_call" and item.get("status") == "completed":
        return (item, "arguments", True)
    return None


def _calling(
    provider: str, events: list[dict[str, Any]], recorded: str, name: str, args: dict[str, Any]
) -> list[dict[str, Any]]:
    """The recorded stream, calling the tool ``name`` (on OpenAI Responses: ``name`` in the
    ``bookings`` namespace) with ``args``: the first fragment carries them whole, the others
    are left out (OpenAI Responses' ``sequence_number`` renumbered, so there is no gap)."""
    out: list[dict[str, Any]] = []
    placed = False
    for event in _renamed(copy.deepcopy(events), recorded, name):
        if provider == "openai-responses":
            for item in [event.get("item", {}), *event.get("response", {}).get("output", ())]:
                if item.get("type") == "function_call":
                    item["namespace"] = "bookings"
        slot = _argument_slot(provider, event)
        if slot is not None:
            holder, key, whole = slot
            if not whole and placed:
                continue
            holder[key] = args if provider == "gemini" else json.dumps(args)
            placed = placed or not whole
        out.append(event)
    for number, event in enumerate(out):  # no gap where fragments were left out
        if "sequence_number" in event:
            event["sequence_number"] = number
    return out


def _assembled(reg: Registry, events: list[Any], adapter: StreamAdapter) -> list[Any]:
    assembler = Assembler(reg)
    bind = TurnStarted(
        command_id="bind", issued_by="gateway", issued_at=0.0,
        tenant=CTX.tenant, turn_id=CTX.turn_id, actor=CTX.actor,
    )  # fmt: skip
    outputs = assembler.handle(bind, 0.0)
    for event in run_adapter(adapter, events):
        outputs += assembler.handle(event, 0.0)
    return [o for o in outputs if isinstance(o, Dispatch | Proposal)]


@pytest.mark.parametrize("tool", sorted(MCP_CALLS))
@pytest.mark.parametrize(("provider", "path", "recorded", "adapter"), EVERY_PROVIDER)
def test_an_imported_mcp_registrys_tools_are_called_from_every_provider(
    provider: str, path: str, recorded: str, adapter: type[StreamAdapter], tool: str
) -> None:
    """The "done when" of issue 43: the registry `processor tools import-mcp` wrote for the
    example MCP server, rendered for the provider; a recorded stream of that provider calls the
    tool by the name it was rendered with; the real adapter and the Assembler resolve it to the
    namespaced, pinned entry and validate the arguments against its imported schema (a
    confirmed tool's call waits as a proposal, the other is dispatched); arguments the schema
    refuses are neither."""
    from processor.registry_file import load_registry

    imported = load_registry(MCP_TOOLS)
    rendered = tool_definitions(imported, provider, tenant=CTX.tenant, actor=CTX.actor)
    if provider == "openai-responses":
        [group] = rendered
        assert (group["type"], group["name"]) == ("namespace", "bookings")
        offered = [t["name"] for t in group["tools"]]
    elif provider == "openai-chat":
        offered = [t["function"]["name"] for t in rendered]
    elif provider == "gemini":
        offered = [d["name"] for d in rendered[0]["functionDeclarations"]]
    elif provider == "bedrock":
        offered = [t["toolSpec"]["name"] for t in rendered]
    else:
        offered = [t["name"] for t in rendered]
    [name] = [n for n in offered if n.endswith(tool)]
    assert name == (tool if provider == "openai-responses" else f"bookings__{tool}")
    entry = imported.resolve(tool, "bookings")
    assert entry is not None and entry.declaration.mcp is not None

    events = _calling(provider, load_events(DATA / path), recorded, name, MCP_CALLS[tool])
    [call] = _assembled(imported, events, adapter(CTX))
    assert isinstance(call, Proposal if entry.declaration.requires_confirmation else Dispatch)
    assert (call.namespace, call.tool) == ("bookings", tool)
    assert call.tool_version == entry.declaration.version
    assert call.arguments == MCP_CALLS[tool]

    wrong = _calling(provider, load_events(DATA / path), recorded, name, {"when": "soon"})
    assert _assembled(imported, wrong, adapter(CTX)) == []
