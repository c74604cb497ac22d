"""The provider tables, data only: what each provider's stream means for its calls.

This module owns, for every provider an adapter reads, one :class:`ProviderTable`:

* ``stops``: the documented stop reasons and their verdicts (a
  :class:`~processor.adapters.verdicts.StopTable`; the mechanism lives in
  :mod:`processor.adapters.verdicts`);
* ``end``: how a stream ends normally. A response is ``completed`` only once its stream reached
  this end (the stop marker alone is not enough: the stream's last word decides);
* ``voiding_tail``: the events that may still arrive between the stop marker and that end and
  void the response (an asynchronous content filter's verdict, an exception event);
* ``client_calls``: the only shape the adapter reads as a client function call (an allowlist);
* ``provider_side``: the tool blocks and items the provider runs itself. They never reach
  ``dispatch``: the adapter starts no call for them (nor for any other type it does not know).

The adapters read their own row (``STOP_REASONS = CHAT.stops``, ...); this module imports no
adapter, so there is no import circle. ``python -m processor.adapters.providers`` prints the
README's "Provider stop reasons" tables, and a test keeps the README's copy in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from processor.adapters.verdicts import StopTable, normal, readme_section, voiding
from processor.core.events import ResponseStatus

_SAFETY = ResponseStatus.FAILED


@dataclass(frozen=True)
class ProviderTable:
    """One provider's row: stop reasons, normal end, voiding tail, client and provider tools."""

    key: str
    """The adapter's provider name (``processor adapt --provider``)."""
    stops: StopTable
    end: str
    """The stream's documented normal end, after which ``completed`` may be written."""
    voiding_tail: Mapping[str, str]
    """Event → meaning: events between the stop marker and the end that void the response."""
    client_calls: str
    """What the adapter reads as a client function call (nothing else becomes a call)."""
    provider_side: Mapping[str, str]
    """Type → meaning: tools the provider runs itself; never dispatched."""


RESPONSES: Final = ProviderTable(
    key="openai-responses",
    stops=StopTable(
        provider="OpenAI Responses",
        read_from="response.completed, or response.incomplete's incomplete_details.reason",
        rules={
            "completed": normal("response.completed"),
            "max_output_tokens": voiding(
                ResponseStatus.INCOMPLETE, "response.incomplete: the output token limit was hit"
            ),
            "content_filter": voiding(
                ResponseStatus.FAILED, "response.incomplete: the content filter cut the output"
            ),
        },
    ),
    end="`response.completed` (the stream's last event)",
    voiding_tail={
        "`error`": "a mid-stream error before `response.completed`",
        "`response.failed`, `response.incomplete`": "the response's own voiding end",
    },
    client_calls='output item `type: "function_call"`',
    provider_side={
        "web_search_call": "hosted web search",
        "file_search_call": "hosted file search",
        "code_interpreter_call": "hosted code interpreter",
        "image_generation_call": "hosted image generation",
        "mcp_call": "a remote MCP server's tool, called by OpenAI",
        "mcp_list_tools": "MCP tool listing",
        "mcp_approval_request": "MCP approval request (answered in a later request)",
        "tool_search_call": "hosted tool search",
        "computer_call": "computer use (not a function call; ignored)",
        "local_shell_call": "local shell (not a function call; ignored)",
        "shell_call": "shell tool (not a function call; ignored)",
        "apply_patch_call": "apply_patch tool (not a function call; ignored)",
        "custom_tool_call": "free-form custom tool (not a function call; ignored)",
        "program": "programmatic tool calling's program (run by OpenAI)",
    },
)

CHAT: Final = ProviderTable(
    key="openai-chat",
    stops=StopTable(
        provider="OpenAI Chat Completions",
        read_from="choices[].finish_reason, completed at [DONE] or the end of the stream",
        rules={
            "tool_calls": normal("the model called tools"),
            "stop": normal("natural stop or stop sequence; a forced tool call ends so"),
            "function_call": normal("deprecated single function call (delta.function_call)"),
            "length": voiding(ResponseStatus.INCOMPLETE, "max_tokens or the context was reached"),
            "max_tokens": voiding(
                ResponseStatus.INCOMPLETE, "the token limit (compatible servers)"
            ),
            "model_length": voiding(ResponseStatus.INCOMPLETE, "the context limit (Mistral)"),
            "content_filter": voiding(ResponseStatus.FAILED, "content omitted by a content filter"),
            "error": voiding(ResponseStatus.ERROR, "a compatible server's mid-stream error"),
        },
    ),
    end="`data: [DONE]`, or the end of the body after the last chunk",
    voiding_tail={
        "`content_filter_results` with `filtered: true`": (
            "Azure OpenAI's asynchronous filter judged the content after `finish_reason`"
        ),
        "a later `finish_reason` that is not normal": (
            "e.g. Azure's `content_filter` after `tool_calls`"
        ),
        "tool call or function call content for a finished choice": "content after the stop",
        "`error` payload": "a mid-stream error (HTTP 200)",
    },
    client_calls=(
        '`delta.tool_calls[]` entries of `type: "function"` (or no type), and the deprecated '
        "`delta.function_call`"
    ),
    provider_side={
        "tool_calls[] of another type (`custom`)": "not a function call; ignored with an anomaly",
    },
)

ANTHROPIC: Final = ProviderTable(
    key="anthropic",
    stops=StopTable(
        provider="Anthropic Messages",
        read_from="message_delta.delta.stop_reason, completed at message_stop",
        rules={
            "end_turn": normal("the model finished its turn"),
            "tool_use": normal("the model calls tools"),
            "stop_sequence": normal("a stop sequence was generated"),
            "max_tokens": voiding(
                ResponseStatus.INCOMPLETE, "cut at max_tokens: a last tool_use block is incomplete"
            ),
            "model_context_window_exceeded": voiding(
                ResponseStatus.INCOMPLETE, "cut at the context window: treat as truncated"
            ),
            "pause_turn": voiding(
                ResponseStatus.INCOMPLETE, "a server-tool loop paused; the turn continues later"
            ),
            "refusal": voiding(
                ResponseStatus.FAILED, "streaming classifiers intervened; drop the refused turn"
            ),
        },
    ),
    end="`message_stop` (an SSE event terminated by its blank line)",
    voiding_tail={
        "`error`": "a mid-stream error (`overloaded_error`, ...) before `message_stop`",
    },
    client_calls='content block `type: "tool_use"`',
    provider_side={
        "server_tool_use": "a server tool (web search, web fetch, code execution, tool search)",
        "mcp_tool_use": "a remote MCP server's tool, called by Anthropic",
        "web_search_tool_result": "its result",
        "web_fetch_tool_result": "its result",
        "code_execution_tool_result": "its result",
        "bash_code_execution_tool_result": "its result",
        "text_editor_code_execution_tool_result": "its result",
        "tool_search_tool_result": "its result",
        "mcp_tool_result": "its result",
        "container_upload": "a file for the code-execution container",
    },
)

GEMINI: Final = ProviderTable(
    key="gemini",
    stops=StopTable(
        provider="Gemini / Vertex AI",
        read_from="candidates[].finishReason, completed at the end of the stream",
        rules={
            "STOP": normal("natural stop or stop sequence; function calls end so"),
            "MAX_TOKENS": voiding(ResponseStatus.INCOMPLETE, "the output token limit was reached"),
            "SAFETY": voiding(_SAFETY, "flagged for safety"),
            "RECITATION": voiding(_SAFETY, "flagged for recitation"),
            "LANGUAGE": voiding(_SAFETY, "unsupported language"),
            "BLOCKLIST": voiding(_SAFETY, "forbidden terms"),
            "PROHIBITED_CONTENT": voiding(_SAFETY, "prohibited content"),
            "SPII": voiding(_SAFETY, "sensitive personal information"),
            "IMAGE_SAFETY": voiding(_SAFETY, "generated image flagged for safety"),
            "IMAGE_PROHIBITED_CONTENT": voiding(_SAFETY, "generated image prohibited"),
            "IMAGE_RECITATION": voiding(_SAFETY, "generated image flagged for recitation"),
            "IMAGE_OTHER": voiding(_SAFETY, "image generation stopped for another reason"),
            "NO_IMAGE": voiding(_SAFETY, "an image was expected and none was generated"),
            "MALFORMED_FUNCTION_CALL": voiding(_SAFETY, "the generated function call is invalid"),
            "UNEXPECTED_TOOL_CALL": voiding(_SAFETY, "a tool call where no tool was enabled"),
            "TOO_MANY_TOOL_CALLS": voiding(_SAFETY, "too many consecutive tool calls"),
            "MISSING_THOUGHT_SIGNATURE": voiding(_SAFETY, "a thought signature was missing"),
            "MALFORMED_RESPONSE": voiding(_SAFETY, "the response could not be parsed"),
            "OTHER": voiding(_SAFETY, "stopped for another reason"),
            "FINISH_REASON_UNSPECIFIED": voiding(_SAFETY, "unspecified"),
        },
    ),
    end="the last chunk (the end of the stream after the chunk with `finishReason`)",
    voiding_tail={
        "`error` chunk": "a mid-stream error after `finishReason`",
        "`promptFeedback.blockReason`": "the prompt was blocked",
        "content or another `finishReason` for a finished candidate": "content after the stop",
    },
    client_calls="part `functionCall`",
    provider_side={
        "executableCode": "built-in code execution: the code the model wrote",
        "codeExecutionResult": "built-in code execution: its result",
        "toolCall": "a server-side tool call (Google Search, URL context, Maps, file search)",
        "toolResponse": "its response",
    },
)

BEDROCK: Final = ProviderTable(
    key="bedrock",
    stops=StopTable(
        provider="Amazon Bedrock ConverseStream",
        read_from="messageStop.stopReason, completed at metadata then the end of the stream",
        rules={
            "end_turn": normal("the model finished its turn"),
            "tool_use": normal("the model calls tools"),
            "stop_sequence": normal("a stop sequence was generated"),
            "max_tokens": voiding(ResponseStatus.INCOMPLETE, "the output token limit was reached"),
            "model_context_window_exceeded": voiding(
                ResponseStatus.INCOMPLETE, "the context window was filled"
            ),
            "guardrail_intervened": voiding(ResponseStatus.FAILED, "a guardrail intervened"),
            "content_filtered": voiding(ResponseStatus.FAILED, "a content filter removed output"),
            "malformed_model_output": voiding(
                ResponseStatus.FAILED, "the model output is malformed"
            ),
            "malformed_tool_use": voiding(ResponseStatus.FAILED, "a tool use is malformed"),
        },
    ),
    end="`metadata`, then the end of the stream",
    voiding_tail={
        "`serviceUnavailableException`": "the service is unavailable",
        "`internalServerException`": "an internal server error",
        "`modelStreamErrorException`": "a streaming error",
        "`throttlingException`": "throttled",
        "`validationException`": "the request failed validation",
        "any other `…Exception`, an eventstream `error` frame": "fail closed",
        "content after `messageStop`": "content after the stop",
    },
    client_calls="`contentBlockStart.start.toolUse` without a `type`",
    provider_side={
        'toolUse `type: "server_tool_use"`': (
            "a system tool Bedrock runs itself, answered by a `toolResult` block"
        ),
        "toolResult": "a system tool's result, in the model's own output",
    },
)

TABLES: Final = (RESPONSES, CHAT, ANTHROPIC, GEMINI, BEDROCK)
"""Every provider, in the README's order."""


def tools_and_tails_markdown(tables: tuple[ProviderTable, ...] = TABLES) -> str:
    """One table: per provider, its normal end, voiding tail events and provider-side tools."""
    lines = [
        "| provider | completed only at | voiding tail events (before that end) "
        "| client calls (nothing else is dispatchable) | provider-side tools (never dispatched) |",
        "|---|---|---|---|---|",
    ]
    for table in tables:
        tails = "; ".join(f"{event}: {meaning}" for event, meaning in table.voiding_tail.items())
        tools = ", ".join(_code(kind) for kind in table.provider_side)
        lines.append(
            f"| {table.stops.provider} | {table.end} | {tails} | {table.client_calls} | {tools} |"
        )
    return "\n".join(lines)


def _code(kind: str) -> str:
    """A bare type name in backticks; a phrase (it has a space or backticks) as it is."""
    return kind if "`" in kind or " " in kind else f"`{kind}`"


def readme_tables() -> str:
    """The README's "Provider stop reasons" tables: tools and tails, then the stop reasons."""
    stops = readme_section(table.stops for table in TABLES)
    return tools_and_tails_markdown() + "\n\n" + stops


if __name__ == "__main__":  # python -m processor.adapters.providers: the README's tables
    print(readme_tables())
