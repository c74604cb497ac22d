"""The registry offered to the model: tool definitions in each provider's own shape. Pure.

:func:`tool_definitions` renders the registry's entries as the value of a provider's tools
parameter, so a gateway writes no tool list by hand and the names the model is offered are the
names the registry resolves:

=====================  ===========================================================  =========
provider               what it returns (the request field it fills)                 names
=====================  ===========================================================  =========
``openai-responses``   ``FunctionToolParam`` items; a namespaced tool inside a       as declared
                       ``NamespaceToolParam`` of its namespace (``tools``)
``openai-chat``        ``ChatCompletionFunctionToolParam`` items (``tools``)         flattened
``anthropic``          ``ToolParam`` items with ``input_schema`` (``tools``)         flattened
``gemini``             one ``Tool`` with ``functionDeclarations``                    flattened
                       (``config.tools``); the schema converted by
                       :mod:`processor.adapters.gemini_schema`
``bedrock``            ``{"toolSpec": …}`` items with ``inputSchema.json``           flattened
                       (``toolConfig.tools``)
=====================  ===========================================================  =========

*Names.* Only OpenAI Responses sends a namespace with a call. Every other provider is offered a
namespaced tool under its flattened name (:func:`processor.core.flat_names.flat_name`, e.g.
``bookings__book_slot``), which the registry resolves to the namespaced tool, so the definitions
and the resolution share one mapping. A name the provider refuses (over 64 characters, a
character outside ``[a-zA-Z0-9_-]``; Gemini: a first character that is not a letter or ``_``)
raises :class:`~processor.core.errors.OfferError`, as does a schema Gemini cannot hold.

*Least privilege, reviewed text.* Only the entries the turn's tenant and actor may call are
rendered (``allowed_tenants``, ``allowed_actors``: what :func:`processor.core.policy.permission`
checks again for every call), with the registry's own ``description`` and ``parameters``: for an
MCP tool, the pinned definition a person reviewed, never what the server lists now.

*Strict mode* (``strict``; OpenAI's two APIs and Anthropic have it): the provider constrains the
model's output to the schema, so a strict tool's arguments always parse and match it (the
registry still validates every call; strict is never trusted). It needs a schema in the subset
those providers enforce: every object with ``additionalProperties: false`` and every property
``required``, and no keyword outside :data:`STRICT_KEYWORDS`. ``strict=None`` (the default) turns
it on for each tool whose schema allows it and off otherwise; ``True`` raises OfferError for a
tool whose schema does not allow it (naming why); ``False`` never asks for it. Gemini and Bedrock
have no strict flag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from processor.adapters.gemini_schema import gemini_schema
from processor.core.errors import OfferError
from processor.core.flat_names import SAFE_NAME, flat_name, is_provider_safe
from processor.core.registry import Registry, ToolDeclaration

__all__ = [
    "PROVIDERS",
    "STRICT_KEYWORDS",
    "offered_name",
    "strict_problem",
    "tool_definitions",
]

PROVIDERS: Final = ("openai-responses", "openai-chat", "anthropic", "gemini", "bedrock")
"""The providers :func:`tool_definitions` renders for (the adapters' provider names)."""

STRICT_KEYWORDS: Final = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "$defs", "$ref", "description", "title", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip
"""The JSON Schema keywords a strict tool's schema may use."""

_GEMINI_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.\-]{0,63}")


def tool_definitions(
    registry: Registry,
    provider: str,
    *,
    tenant: str,
    actor: str,
    strict: bool | None = None,
) -> list[dict[str, Any]]:
    """The registry's tools that ``actor`` of ``tenant`` may call, as ``provider``'s tools.

    See the module docstring for each provider's shape, names and the strict rule. Raises
    OfferError for a tool that cannot be offered as declared, ValueError for an unknown
    provider."""
    tools = [t for t in registry.tools if t.permits(tenant, actor)]
    if provider == "openai-responses":
        return _responses(tools, strict)
    if provider == "openai-chat":
        return [
            {"type": "function", "function": _function(t, "openai-chat", strict)} for t in tools
        ]
    if provider == "anthropic":
        return [_anthropic(t, strict) for t in tools]
    if provider == "gemini":
        return [{"functionDeclarations": [_gemini(t) for t in tools]}] if tools else []
    if provider == "bedrock":
        return [_bedrock(t) for t in tools]
    raise ValueError(f"unknown provider {provider!r} (one of {', '.join(PROVIDERS)})")


def offered_name(declaration: ToolDeclaration, provider: str) -> str:
    """The name ``provider``'s model is offered the tool by, and calls it by.

    The first of its name and aliases the provider accepts, as declared (a bare tool, or a
    namespaced one inside its namespace for OpenAI Responses) or flattened (a namespaced tool
    for every other provider); the registry resolves each of them to the tool. Raises
    OfferError when the provider accepts none."""
    namespace = declaration.namespace
    in_namespace = provider == "openai-responses" and namespace is not None
    in_namespace = in_namespace and is_provider_safe(namespace or "")
    accepts = _GEMINI_NAME.fullmatch if provider == "gemini" else SAFE_NAME.fullmatch
    for written in (declaration.name, *declaration.aliases):
        name = written if namespace is None or in_namespace else flat_name(namespace, written)
        if accepts(name) is not None:
            return name
    raise OfferError(
        detail=f"{_who(declaration)}: {provider} accepts none of its names (declare a "
        "provider-safe alias for it)"
    )


def strict_problem(schema: Any, path: str = "parameters") -> str | None:
    """Why ``schema`` cannot be a strict tool's schema, or None when it can."""
    if not isinstance(schema, Mapping):
        return f"{path} is a boolean schema"
    for key, value in schema.items():
        at = f"{path}.{key}"
        if key not in STRICT_KEYWORDS:
            return f"{at}: strict mode does not take this keyword"
        subs: Iterable[tuple[str, Any]] = ()
        if key in ("properties", "$defs"):
            subs = ((f"{at}.{k}", v) for k, v in value.items())
        elif key == "anyOf":
            subs = ((f"{at}[{i}]", v) for i, v in enumerate(value))
        elif key == "items" or (key == "additionalProperties" and not isinstance(value, bool)):
            subs = ((at, value),)
        for sub_path, sub in subs:
            problem = strict_problem(sub, sub_path)
            if problem is not None:
                return problem
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"{path}: an object needs additionalProperties: false"
        if set(schema.get("required", ())) != set(schema.get("properties", {})):
            return f"{path}: every property must be required (make an optional one nullable)"
    return None


# ---------------------------------------------------------------------------- providers


def _responses(tools: list[ToolDeclaration], strict: bool | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    namespaces: dict[str, dict[str, Any]] = {}
    for tool in tools:
        entry = {"type": "function", **_function(tool, "openai-responses", strict)}
        namespace = tool.namespace
        if namespace is None or not is_provider_safe(namespace):
            out.append(entry)  # bare, or by its flattened name
            continue
        group = namespaces.get(namespace)
        if group is None:
            group = namespaces[namespace] = {
                "type": "namespace",
                "name": namespace,
                "description": f"The tools of {namespace}.",
                "tools": [],
            }
            out.append(group)
        group["tools"].append(entry)
    return out


def _function(tool: ToolDeclaration, provider: str, strict: bool | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": offered_name(tool, provider)}
    entry["parameters"] = dict(tool.parameters)
    if tool.description:
        entry["description"] = tool.description
    entry["strict"] = _strict(tool, strict)
    return entry


def _anthropic(tool: ToolDeclaration, strict: bool | None) -> dict[str, Any]:
    schema = {"type": "object", **tool.parameters}
    entry: dict[str, Any] = {"name": offered_name(tool, "anthropic"), "input_schema": schema}
    if tool.description:
        entry["description"] = tool.description
    if _strict(tool, strict):
        entry["strict"] = True
    return entry


def _gemini(tool: ToolDeclaration) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": offered_name(tool, "gemini")}
    entry["parameters"] = gemini_schema(tool.parameters, _who(tool))
    if tool.description:
        entry["description"] = tool.description
    return entry


def _bedrock(tool: ToolDeclaration) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": offered_name(tool, "bedrock")}
    spec["inputSchema"] = {"json": dict(tool.parameters)}
    if tool.description:
        spec["description"] = tool.description
    return {"toolSpec": spec}


def _strict(tool: ToolDeclaration, asked: bool | None) -> bool:
    if asked is False:
        return False
    problem = strict_problem(tool.parameters)
    if problem is not None and asked:
        raise OfferError(detail=f"{_who(tool)}: strict mode asked, but {problem}")
    return problem is None


def _who(tool: ToolDeclaration) -> str:
    return f"tool {tool.name!r}" + (f" of {tool.namespace!r}" if tool.namespace else "")
