"""Offline commands: ``replay`` (incident review and the core's black-box harness) and
``states`` (the transition table as a diagram); ``schemas`` is :mod:`processor.cli.schemas`.

``replay`` runs one Assembler over fragment and control events (one JSON object a line) and
writes every output as one JSON line with a ``kind`` field. Time comes from the records
themselves (``ts`` or ``issued_at``, never decreasing), so the same input gives the same output.
Operator commands are checked against ``--keyring`` when one is given (as a worker with that
keyring would judge them); without one, replay applies them unchecked (an offline review with
no side effect: what would the calls have become had the commands been applied).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # the command imports them when it runs (``processor --help`` stays fast)
    from processor.core.assembler import Assembler
    from processor.core.authn import CommandVerifier
    from processor.core.events import OutputRecord


@functools.cache
def kinds() -> dict[type[Any], str]:
    """Output model → its ``kind`` (the record's ``type``)."""
    from processor.core.events import OUTPUT_TOPIC  # noqa: PLC0415

    return {model: model.model_fields["type"].default for model in OUTPUT_TOPIC}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = subparsers.add_parser("replay", help="run the Assembler over a JSON-lines event file")
    replay.add_argument("--tools", required=True, help="tool registry (YAML or JSON)")
    replay.add_argument("events", nargs="?", default="-", help="events file, or - for stdin")
    replay.add_argument("--summary", action="store_true", help="print counts to stderr at the end")
    replay.add_argument(
        "--keyring",
        action="append",
        help="check operator commands' signatures with this keyring (default: unchecked)",
    )
    replay.add_argument(
        "--format",
        choices=["json", "text"],
        default="json",
        help="json: one output per line with a `kind` field; text: a line for people",
    )
    replay.set_defaults(func=_replay_command)

    states = subparsers.add_parser("states", help="print the call state machine (mermaid)")
    states.set_defaults(func=_states_command)


def replay(
    lines: Iterable[bytes], assembler: Assembler, *, source: str = "replay"
) -> Iterator[OutputRecord]:
    """Feed each line to the Assembler, advancing time from the records; yield every output.

    Only a record that decodes moves the clock: a rejected one is a dead letter at the current
    time, so a malformed record with a far-future ``ts`` cannot expire every open call.
    """
    from processor.core.errors import RecordRejected  # noqa: PLC0415
    from processor.core.events import decode_input, event_time  # noqa: PLC0415
    from processor.core.outputs import RecordSource  # noqa: PLC0415

    now = 0.0
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        where = RecordSource(source, 0, number)
        try:
            event = decode_input(line)
        except RecordRejected as exc:
            yield assembler.dead_letter(line, where, exc.reason, exc.detail, now)
            continue
        when = event_time(event)
        now = max(now, when if math.isfinite(when) else 0.0)
        yield from assembler.tick(now)
        yield from assembler.handle(line, now, source=where, decoded=event)


def output_line(record: OutputRecord) -> bytes:
    data: dict[str, Any] = {"kind": kinds()[type(record)]}
    data.update(record.model_dump(mode="json"))
    if "namespace" in data and data["namespace"] is None:
        del data["namespace"]  # as on the wire (``encode``): a bare tool names no namespace
    from processor.observability.terminal import printable_json  # noqa: PLC0415

    # untrusted text escaped for a terminal: the same JSON value
    return printable_json(orjson.dumps(data).decode()).encode() + b"\n"


def _shown_tool(tool: str | None, namespace: str | None) -> str:
    """A tool as a reader sees it: ``crm.transfer`` for ``transfer`` in namespace ``crm``."""
    return f"{namespace}.{tool}" if namespace is not None else str(tool)


def text_line(record: OutputRecord) -> bytes:
    """One readable line: dispatches and proposals show arguments; nothing else carries them."""
    from processor.core.events import Audit, DeadLetter, Dispatch, Ledger, Proposal, Status  # noqa: PLC0415

    match record:
        case Dispatch():
            args = orjson.dumps(record.arguments).decode()
            tool = _shown_tool(record.tool, record.namespace)
            text = f"DISPATCH  {tool}({args})  call={record.call_id} id={record.dispatch_id}"
        case Proposal():
            args = orjson.dumps(record.arguments).decode()
            tool = _shown_tool(record.tool, record.namespace)
            text = f"PROPOSAL  {tool}({args})  call={record.call_id} {record.args_digest}"
        case Ledger():
            text = (
                f"ledger    {_shown_tool(record.tool, record.namespace)}"
                f"  call={record.call_id}  {record.state}"
                f"  reason={record.terminal_reason}  fragments={record.fragment_count}"
                f"  bytes={record.bytes}  validation={record.validation_result}"
            )
        case Status():
            retry = "  (retry possible)" if record.retry_possible else ""
            text = f"status    call={record.call_id}  {record.state}: {record.message}{retry}"
        case Audit():
            text = (
                f"audit     {record.command_type} by {record.issued_by}: {record.outcome}"
                f"{' (' + record.rejection + ')' if record.rejection else ''}"
                f"  affected={len(record.affected)}"
            )
        case DeadLetter():
            where = f"{record.source_topic}@{record.offset}"
            text = f"DEAD      {where}: {record.reason} {record.detail}"
    from processor.observability.terminal import printable  # noqa: PLC0415

    return printable(text).encode() + b"\n"


def _replay_verifier(keyring: list[str] | None) -> CommandVerifier:
    """The keyring named (an empty one is refused, exit 78), else explicitly no checks."""
    from processor.core.authn import AllowUnsigned  # noqa: PLC0415

    if keyring is None:
        return AllowUnsigned()
    from processor.ops.signing import Keyring  # noqa: PLC0415

    return Keyring.load(*keyring)


def _replay_command(args: argparse.Namespace) -> int:
    from processor.cli.recursion import allow_deep_validation  # noqa: PLC0415
    from processor.core.assembler import Assembler  # noqa: PLC0415
    from processor.core.policy import Limits  # noqa: PLC0415
    from processor.registry_file import load_registry  # noqa: PLC0415

    allow_deep_validation()  # also for the checks of a deep schema at load
    registry = load_registry(args.tools)  # a RegistryError is one line (the CLI's boundary)
    stream: IO[bytes] = sys.stdin.buffer if args.events == "-" else open(args.events, "rb")  # noqa: SIM115
    assembler = Assembler(registry, Limits(), verifier=_replay_verifier(args.keyring))
    counts: dict[str, int] = {}
    render = output_line if args.format == "json" else text_line
    kind_of = kinds()
    with stream:
        out = sys.stdout.buffer
        for record in replay(stream, assembler, source=args.events):
            kind = kind_of[type(record)]
            counts[kind] = counts.get(kind, 0) + 1
            out.write(render(record))
        out.flush()
    if args.summary:
        summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "no outputs"
        print(f"replay: {summary}; open buffers={assembler.open_buffers}", file=sys.stderr)
    return 0


def _states_command(_args: argparse.Namespace) -> int:
    from processor.core.states import mermaid  # noqa: PLC0415

    print(mermaid())
    return 0
