"""toolcall-processor: streamed LLM tool calls → complete, validated, exactly-once dispatches.

The curated public API (guarded by ``tests/unit/test_public_api.py``). Everything is imported
lazily on first use (PEP 562), so ``import processor`` stays cheap and does not load aiokafka,
jsonschema or any provider SDK::

    import processor

    turn = processor.TurnContext(tenant="acme", turn_id="t-1", actor="user-42")
    async with processor.Publisher(processor.Settings()) as publisher:
        await publisher.start_turn(turn)
        async for chunk in processor.tee_stream(sdk_stream, publisher, turn=turn):
            ...  # the SDK's own events, unchanged; tool calls go to Kafka

* offline: :class:`Assembler`, :class:`Registry` / :func:`load_registry`, :class:`Limits` and
  the wire events (:class:`CallStarted` … :class:`Dispatch`), :func:`encode`;
* adapters: :class:`TurnContext`, :class:`StreamAdapter` and one adapter per provider protocol;
  :func:`tool_definitions`, the registry's tools in a provider's own shape (what the model is
  offered);
* gateways: :class:`Publisher`, :class:`BlockingPublisher`, :func:`publish_events`,
  :func:`tee_stream`, :func:`tee_stream_sync`, :class:`TeeState`, :func:`tee_response`,
  :func:`tee_response_sync`;
* agents: :class:`OutcomeFollower` / :class:`BlockingOutcomeFollower` follow a turn's calls to
  their :class:`Outcome` (:class:`FollowedTurn`, :class:`TurnReport`, :class:`OutcomeKind`), and
  :func:`tool_results` / :func:`outcome_text` tell them back to the model in its provider's shape;
* executors: :class:`ExecutorClient`, :class:`Handlers`, :class:`Call`, :class:`ExecutionFailed`;
* :class:`Settings`, and the error tree rooted at :class:`ProcessorError`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from processor.adapters.anthropic import AnthropicMessagesAdapter
    from processor.adapters.base import StreamAdapter, TurnContext
    from processor.adapters.bedrock import BedrockConverseAdapter
    from processor.adapters.gemini import GeminiAdapter
    from processor.adapters.offer import tool_definitions
    from processor.adapters.openai_chat import OpenAIChatAdapter
    from processor.adapters.openai_responses import OpenAIResponsesAdapter
    from processor.agent.follower import (
        BlockingOutcomeFollower,
        FollowedTurn,
        OutcomeFollower,
        TurnReport,
    )
    from processor.agent.messages import outcome_text, tool_results
    from processor.agent.outcomes import Outcome, OutcomeKind
    from processor.core.assembler import Assembler
    from processor.core.errors import (
        AdapterError,
        ArgumentsMismatch,
        AssemblyError,
        BusinessInvalid,
        ConfigurationError,
        Described,
        DuplicateConflict,
        ExecutionError,
        InvalidTransition,
        KafkaStepError,
        LimitExceeded,
        MalformedJson,
        McpError,
        OfferError,
        ProcessorError,
        ProtocolViolation,
        RecordRejected,
        RegistryError,
        SchemaInvalid,
        SequenceGap,
        StateStoreError,
        UnknownTool,
    )
    from processor.core.events import (
        CallDelta,
        CallEnded,
        CallKey,
        CallStarted,
        Dispatch,
        FragmentEvent,
        Proposal,
        ResponseEnded,
        ResponseStatus,
        Status,
        TurnCancelled,
        TurnStarted,
        encode,
    )
    from processor.core.policy import Limits
    from processor.core.registry import Registry
    from processor.executor.client import ExecutorClient
    from processor.executor.handlers import Call, ExecutionFailed, Handlers
    from processor.integrations.httpx import tee_response, tee_response_sync
    from processor.integrations.tee import TeeState, tee_stream, tee_stream_sync
    from processor.kafka.publish import BlockingPublisher, Publisher, publish_events
    from processor.registry_file import load_registry
    from processor.settings import Settings

__version__: Final = "0.1.0"

_ERRORS: Final = (
    "AdapterError",
    "ArgumentsMismatch",
    "AssemblyError",
    "BusinessInvalid",
    "ConfigurationError",
    "Described",
    "DuplicateConflict",
    "ExecutionError",
    "InvalidTransition",
    "KafkaStepError",
    "LimitExceeded",
    "MalformedJson",
    "McpError",
    "OfferError",
    "ProcessorError",
    "ProtocolViolation",
    "RecordRejected",
    "RegistryError",
    "SchemaInvalid",
    "SequenceGap",
    "StateStoreError",
    "UnknownTool",
)

_EXPORTS: Final[dict[str, str]] = {
    # offline assembly
    "Assembler": "processor.core.assembler",
    "Limits": "processor.core.policy",
    "Registry": "processor.core.registry",
    "load_registry": "processor.registry_file",
    "CallDelta": "processor.core.events",
    "CallEnded": "processor.core.events",
    "CallKey": "processor.core.events",
    "CallStarted": "processor.core.events",
    "Dispatch": "processor.core.events",
    "FragmentEvent": "processor.core.events",
    "Proposal": "processor.core.events",
    "ResponseEnded": "processor.core.events",
    "ResponseStatus": "processor.core.events",
    "Status": "processor.core.events",
    "TurnCancelled": "processor.core.events",
    "TurnStarted": "processor.core.events",
    "encode": "processor.core.events",
    # adapters
    "TurnContext": "processor.adapters.base",
    "StreamAdapter": "processor.adapters.base",
    "AnthropicMessagesAdapter": "processor.adapters.anthropic",
    "BedrockConverseAdapter": "processor.adapters.bedrock",
    "GeminiAdapter": "processor.adapters.gemini",
    "OpenAIChatAdapter": "processor.adapters.openai_chat",
    "OpenAIResponsesAdapter": "processor.adapters.openai_responses",
    "tool_definitions": "processor.adapters.offer",
    # gateways
    "Publisher": "processor.kafka.publish",
    "BlockingPublisher": "processor.kafka.publish",
    "publish_events": "processor.kafka.publish",
    "tee_stream": "processor.integrations.tee",
    "tee_stream_sync": "processor.integrations.tee",
    "TeeState": "processor.integrations.tee",
    "tee_response": "processor.integrations.httpx",
    "tee_response_sync": "processor.integrations.httpx",
    # agents: closing the loop
    "OutcomeFollower": "processor.agent.follower",
    "BlockingOutcomeFollower": "processor.agent.follower",
    "FollowedTurn": "processor.agent.follower",
    "TurnReport": "processor.agent.follower",
    "Outcome": "processor.agent.outcomes",
    "OutcomeKind": "processor.agent.outcomes",
    "tool_results": "processor.agent.messages",
    "outcome_text": "processor.agent.messages",
    # executors
    "ExecutorClient": "processor.executor.client",
    "Handlers": "processor.executor.handlers",
    "Call": "processor.executor.handlers",
    "ExecutionFailed": "processor.executor.handlers",
    # settings and errors
    "Settings": "processor.settings",
    **dict.fromkeys(_ERRORS, "processor.core.errors"),
}

__all__ = [
    "AdapterError",
    "AnthropicMessagesAdapter",
    "ArgumentsMismatch",
    "Assembler",
    "AssemblyError",
    "BedrockConverseAdapter",
    "BlockingOutcomeFollower",
    "BlockingPublisher",
    "BusinessInvalid",
    "Call",
    "CallDelta",
    "CallEnded",
    "CallKey",
    "CallStarted",
    "ConfigurationError",
    "Described",
    "Dispatch",
    "DuplicateConflict",
    "ExecutionError",
    "ExecutionFailed",
    "ExecutorClient",
    "FollowedTurn",
    "FragmentEvent",
    "GeminiAdapter",
    "Handlers",
    "InvalidTransition",
    "KafkaStepError",
    "LimitExceeded",
    "Limits",
    "MalformedJson",
    "McpError",
    "OfferError",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "Outcome",
    "OutcomeFollower",
    "OutcomeKind",
    "ProcessorError",
    "Proposal",
    "ProtocolViolation",
    "Publisher",
    "RecordRejected",
    "Registry",
    "RegistryError",
    "ResponseEnded",
    "ResponseStatus",
    "SchemaInvalid",
    "SequenceGap",
    "Settings",
    "StateStoreError",
    "Status",
    "StreamAdapter",
    "TeeState",
    "TurnCancelled",
    "TurnContext",
    "TurnReport",
    "TurnStarted",
    "UnknownTool",
    "__version__",
    "encode",
    "load_registry",
    "outcome_text",
    "publish_events",
    "tee_response",
    "tee_response_sync",
    "tee_stream",
    "tee_stream_sync",
    "tool_definitions",
    "tool_results",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'processor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
