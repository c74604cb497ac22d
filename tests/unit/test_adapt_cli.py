"""`processor adapt` as a black box: provider bytes in, fragment events out, piped to replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from processor.cli.adapt import detect_format

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "adapters" / "data"
TOOLS = ROOT / "examples" / "tools.yaml"


def adapt(provider: str, body: bytes, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "processor.cli", "adapt", "--provider", provider, "--tenant", "acme",
         "--turn", "u1", "--actor", "alice", *extra, "-"],
        input=body, capture_output=True, cwd=ROOT, check=False,
    )  # fmt: skip


def replay(events: bytes) -> list[dict[str, object]]:
    result = subprocess.run(
        [sys.executable, "-m", "processor.cli", "replay", "--tools", str(TOOLS), "-"],
        input=events, capture_output=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return [orjson.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("openai-chat/single-tool-gpt4o.sse", "sse"),
        ("gemini/whole-call-one-chunk.jsonl", "jsonl"),
        ("bedrock-converse/nova-text-then-tooluse.eventstream", "eventstream"),
    ],
)
def test_format_detection(path: str, expected: str) -> None:
    assert detect_format((DATA / path).read_bytes()[:64]) == expected


@pytest.mark.parametrize(
    ("provider", "path", "tools"),
    [
        (
            "openai-chat",
            "openai-chat/parallel-two-tools-gpt4o.sse",
            ["get_weather", "get_stock_price"],
        ),
        ("bedrock", "bedrock-converse/nova-text-then-tooluse.eventstream", ["get_temperature"]),
        ("anthropic", "anthropic/tool-use-truncated-max-tokens.sse", []),
    ],
)
def test_adapt_then_replay_is_the_offline_pipeline(
    provider: str, path: str, tools: list[str]
) -> None:
    result = adapt(provider, (DATA / path).read_bytes(), "--emit-turn-started")
    assert result.returncode == 0, result.stderr
    dispatched = [o["tool"] for o in replay(result.stdout) if o["kind"] == "dispatch"]
    assert dispatched == tools


def test_bad_chunk_is_a_clear_error_and_open_calls_end_inert() -> None:
    body = (DATA / "openai-chat/single-tool-gpt4o.sse").read_bytes()
    cut = body[: len(body) // 2] + b"\n\ndata: {not json\n\n"
    result = adapt("openai-chat", cut, "--emit-turn-started")
    assert result.returncode == 1
    assert b"processor adapt:" in result.stderr
    events = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["type"] == "response.ended" and events[-1]["status"] == "error"
    assert not [o for o in replay(result.stdout) if o["kind"] == "dispatch"]


def test_corrupt_eventstream_never_dispatches() -> None:
    body = bytearray((DATA / "bedrock-converse/nova-text-then-tooluse.eventstream").read_bytes())
    body[len(body) // 2] ^= 0xFF
    result = adapt("bedrock", bytes(body), "--emit-turn-started")
    assert result.returncode == 1
    assert not [o for o in replay(result.stdout) if o["kind"] == "dispatch"]


def _sse(*payloads: dict[str, object]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in payloads)


def test_an_unknown_anthropic_event_is_counted_and_the_valid_call_dispatches() -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    body = _sse(
        {"type": "message_start", "message": {"id": "msg_1", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "brand_new_event", "detail": {"x": 1}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    )  # fmt: skip
    result = adapt("anthropic", body, "--emit-turn-started")
    assert result.returncode == 0, result.stderr
    assert b"1 unknown anthropic event(s) ignored" in result.stderr
    dispatched = [o for o in replay(result.stdout) if o["kind"] == "dispatch"]
    assert [(d["call_id"], d["arguments"]) for d in dispatched] == [("toolu_1", {"city": "Paris"})]


@pytest.mark.parametrize("terminated", [True, False])
def test_a_body_cut_inside_its_last_event_dispatches_nothing_and_says_so(terminated: bool) -> None:
    """Issue 29: the bundled recording whose ``message_stop`` lacked its blank line. Read as the
    SSE specification (and the anthropic SDK) reads it, the cut event is discarded."""
    body = (DATA / "anthropic/text-then-tool-use.sse").read_bytes()
    if not terminated:
        body = body.rstrip(b"\n")
    result = adapt("anthropic", body, "--emit-turn-started")
    assert result.returncode == 0, result.stderr
    dispatched = [o["tool"] for o in replay(result.stdout) if o["kind"] == "dispatch"]
    assert dispatched == (["get_weather"] if terminated else [])
    assert (b"ended inside an SSE event" in result.stderr) is not terminated


def _two_choices() -> bytes:
    def choice(index: int, city: str) -> dict[str, object]:
        call = {"index": 0, "id": f"call_{index}", "type": "function",
                "function": {"name": "get_weather", "arguments": orjson.dumps({"city": city}).decode()}}  # fmt: skip
        return {"id": "chatcmpl-1", "choices": [{"index": index, "delta": {"tool_calls": [call]}}]}

    def finish(index: int) -> dict[str, object]:
        return {"id": "chatcmpl-1", "choices": [{"index": index, "delta": {},
                                                 "finish_reason": "tool_calls"}]}  # fmt: skip

    return _sse(choice(0, "Paris"), choice(1, "Rome"), finish(0), finish(1)) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("flags", "cities"), [((), ["Paris"]), (("--alternative", "1"), ["Rome"]),
                          (("--alternative", "none"), [])],
)  # fmt: skip
def test_only_the_chosen_alternative_of_n2_dispatches(
    flags: tuple[str, ...], cities: list[str]
) -> None:
    result = adapt("openai-chat", _two_choices(), "--emit-turn-started", *flags)
    assert result.returncode == 0, result.stderr
    outputs = replay(result.stdout)
    assert [o["arguments"]["city"] for o in outputs if o["kind"] == "dispatch"] == cities
    ledger = [o for o in outputs if o["kind"] == "ledger"]
    assert len(ledger) == 2  # the alternative that did not act is recorded too


def test_a_bad_alternative_is_a_usage_error() -> None:
    result = adapt("openai-chat", _two_choices(), "--alternative", "first")
    assert result.returncode == 2
    assert b"an alternative index" in result.stderr
