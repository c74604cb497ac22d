"""What an MCP server's answer to a ``tools/call`` means for the call: its ``results`` output,
or how it failed, or that its outcome is unknown.

The server answered, so it may have acted: an answer the executor cannot use is ``unknown``,
never ``failed`` (``failed`` tells the user the call could not be completed). Only the
server's own ``isError`` is a failure. :func:`result_output` reads the answer (a JSON object
as the server sent it) in this order:

1. not a ``CallToolResult`` → ``unknown``, ``malformed_result``;
2. ``isError`` → ``failed``, ``tool_error`` (its text is not recorded: it may quote the
   arguments);
3. ``{"content": [...], "structuredContent": ...}`` over ``max_bytes`` of JSON → ``unknown``,
   ``result_too_large`` (an answer over the transport's bound never gets here: it is dropped
   while read, :mod:`processor.mcp.transport`);
4. the tool's pinned ``outputSchema`` (:class:`OutputCheck`): ``structuredContent`` absent
   or not valid → ``unknown``, ``result_schema_mismatch``.

The output schema is the pinned one (the server's listing matched the registry's digest),
and it is checked with the registry's validator (:func:`processor.core.toolschema
.tool_validator_class`: patterns by RE2, every keyword linear in the value), never the SDK's,
whose ``pattern`` is Python's backtracking ``re`` run on the event loop. A schema that
validator cannot run (a pattern RE2 refuses, a ``$ref`` that resolves nowhere or loops, an
invalid schema) makes :func:`output_check` say why; the tool's calls are then refused before
they are sent (``output_schema_unusable``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from processor.core.formats import format_checker, jsonschema_module, used_formats
from processor.core.toolschema import (
    PatternError,
    check_schema_patterns,
    meta_format_checker,
    ref_cycles,
    tool_validator_class,
    unresolved_refs,
)
from processor.executor.handlers import ExecutionFailed, OutcomeUnknown

__all__ = ["OutputCheck", "output_check", "result_output"]


@dataclass(frozen=True)
class OutputCheck:
    """A tool's pinned output schema, compiled (``validator``), or why it cannot be run
    (``unusable``). No output schema: no check at all (:func:`output_check` returns None)."""

    validator: Any = None
    unusable: str | None = None

    def accepts(self, structured: Any) -> bool:
        """Whether ``structured`` is valid (a value too deep to check is not)."""
        if self.validator is None:
            return False
        try:
            return bool(self.validator.is_valid(structured))
        except RecursionError:
            return False


def output_check(schema: Any) -> OutputCheck | None:
    """The check of a tool's ``outputSchema`` (None: the tool declares none)."""
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        return OutputCheck(unusable="the output schema is not a JSON object")
    jsonschema = jsonschema_module()
    try:
        check_schema_patterns(schema)
        jsonschema.Draft202012Validator.check_schema(schema, format_checker=meta_format_checker())
    except PatternError as exc:
        return OutputCheck(unusable=f"the output schema {exc}")
    except jsonschema.SchemaError:
        return OutputCheck(unusable="the output schema is not a valid JSON Schema")
    except RecursionError:
        return OutputCheck(unusable="the output schema is nested too deeply")
    if ref_cycles(schema):
        return OutputCheck(unusable="the output schema has a $ref that leads back to itself")
    validator = tool_validator_class()(schema, format_checker=format_checker(used_formats(schema)))
    if unresolved_refs(validator):
        return OutputCheck(unusable="the output schema has a $ref that resolves nowhere")
    return OutputCheck(validator=validator)


def result_output(raw: Any, max_bytes: int, check: OutputCheck | None = None) -> dict[str, Any]:
    """The ``results`` output of an answer, or :class:`ExecutionFailed` /
    :class:`OutcomeUnknown` (see the module docstring)."""
    from mcp.types import CallToolResult  # noqa: PLC0415

    try:
        result = CallToolResult.model_validate(raw, by_name=False)
    except ValueError:  # pydantic's ValidationError: its text may quote the answer, not kept
        raise OutcomeUnknown(
            "malformed_result", detail="the MCP server's answer is not a CallToolResult"
        ) from None
    if result.is_error:
        raise ExecutionFailed(
            "tool_error", detail="the MCP server reported an error result (isError)"
        )
    try:
        output: dict[str, Any] = {
            "content": [
                block.model_dump(by_alias=True, mode="json", exclude_none=True)
                for block in result.content
            ]
        }
        if result.structured_content is not None:
            output["structuredContent"] = result.structured_content
        size = len(orjson.dumps(output))
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        raise OutcomeUnknown(
            "malformed_result", detail="the MCP server's answer is not JSON the results hold"
        ) from None
    if size > max_bytes:
        raise OutcomeUnknown(
            "result_too_large",
            detail=f"the MCP server's answer is {size} bytes, over the {max_bytes}-byte limit",
        )
    if check is not None and not check.accepts(result.structured_content):
        raise OutcomeUnknown(
            "result_schema_mismatch",
            detail="the MCP server's structuredContent does not match the tool's output schema",
        )
    return output
