"""The curated public API of ``processor`` (as httpx guards its ``__all__``)."""

from __future__ import annotations

import subprocess
import sys

import processor
from processor.core import errors

PUBLIC = {
    # offline assembly
    "Assembler", "Limits", "Registry", "load_registry", "encode",
    "CallDelta", "CallEnded", "CallKey", "CallStarted", "Dispatch", "FragmentEvent",
    "Proposal", "ResponseEnded", "ResponseStatus", "Status", "TurnCancelled", "TurnStarted",
    # adapters
    "TurnContext", "StreamAdapter", "AnthropicMessagesAdapter", "BedrockConverseAdapter",
    "GeminiAdapter", "OpenAIChatAdapter", "OpenAIResponsesAdapter", "tool_definitions",
    # gateways
    "Publisher", "BlockingPublisher", "publish_events", "tee_stream", "tee_stream_sync",
    "TeeState", "tee_response", "tee_response_sync",
    # agents: closing the loop
    "OutcomeFollower", "BlockingOutcomeFollower", "FollowedTurn", "TurnReport", "Outcome",
    "OutcomeKind", "tool_results", "outcome_text",
    # executors
    "ExecutorClient", "Handlers", "Call", "ExecutionFailed",
    # settings, errors, version
    "Settings", "__version__",
    "ProcessorError", "RecordRejected", "AssemblyError", "MalformedJson", "UnknownTool",
    "SchemaInvalid", "BusinessInvalid", "LimitExceeded", "ProtocolViolation", "SequenceGap",
    "DuplicateConflict", "ArgumentsMismatch", "InvalidTransition", "RegistryError",
    "ConfigurationError", "AdapterError", "OfferError", "Described", "KafkaStepError",
    "StateStoreError", "ExecutionError", "McpError",
}  # fmt: skip


def test_all_is_the_curated_list() -> None:
    assert set(processor.__all__) == PUBLIC
    assert processor.__all__ == sorted(processor.__all__)


def test_every_public_name_resolves_to_its_object() -> None:
    for name in processor.__all__:
        assert getattr(processor, name) is not None, name
    assert processor.Publisher.__module__ == "processor.kafka.publish"
    assert processor.ExecutorClient.__module__ == "processor.executor.client"
    assert processor.tee_stream.__module__ == "processor.integrations.tee"


def test_the_whole_error_tree_is_public() -> None:
    tree = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.ProcessorError)
    }
    assert tree <= set(processor.__all__)
    for name in tree:
        assert issubclass(getattr(processor, name), processor.ProcessorError)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        processor.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("processor.NoSuchThing resolved")
    assert set(processor.__all__) <= set(dir(processor))


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    )
    return set(out.stdout.split())


def test_import_processor_stays_cheap() -> None:
    loaded = _modules_after("import processor")
    heavy = {"aiokafka", "jsonschema", "openai", "anthropic", "google.genai", "boto3", "httpx"}
    assert not (heavy & loaded), heavy & loaded
    assert "processor.kafka.publish" not in loaded


def test_lazy_names_load_their_module_on_first_use() -> None:
    loaded = _modules_after("import processor\nprocessor.Publisher")
    assert "processor.kafka.publish" in loaded and "aiokafka" in loaded
    loaded = _modules_after("import processor\nprocessor.tee_stream")
    assert "processor.integrations.tee" in loaded
    assert not ({"openai", "anthropic", "google.genai", "boto3"} & loaded)  # SDKs stay optional
