"""`processor adapt` as a black box: provider bytes in, fragment events out, piped to replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from processor.commands_adapt import detect_format

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
