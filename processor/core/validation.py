"""One strict parse, one schema validation, the business validators: once per terminal call.

The incremental scanner has already proved the text is strict JSON (RFC 8259 + I-JSON) and an
object; this module parses it exactly once with orjson (which refuses lone surrogates, raw or
escaped, by itself), refuses what orjson reads but I-JSON forbids (noncharacters in strings and
member names, RFC 7493 §2.1, raw or escaped: found in the canonical serialisation the digest is
made of, where orjson writes every character raw, :func:`has_noncharacter`), validates it against
the tool's compiled Draft 2020-12 schema (format checks on) and runs the tool's business
validators. Problems are
described by location and rule only: jsonschema's own messages quote instance values, and
argument values must never reach a ledger, a log or a status.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from processor.core.errors import PROCESS_EXCEPTIONS
from processor.core.registry import ToolDeclaration, ValidationContext
from processor.core.states import TerminalReason

MAX_PROBLEMS = 5

# Noncharacters (RFC 7493 §2.1) in UTF-8 as orjson writes it (raw, never as \u escapes): the BMP
# ones (U+FDD0-U+FDEF: EF B7 90-AF; U+FFFE, U+FFFF: EF BF BE/BF), and the two last bytes of the
# astral ones (U+nFFFE, U+nFFFF: F0-F4, then 8F/9F/AF/BF, BF, BE/BF). Each pattern starts with a
# literal byte, so a search skips ahead at memchr speed (one alternation of the three ran at a
# tenth of orjson's speed).
_BMP_NONCHARACTER: Final = re.compile(rb"\xef(?:\xb7[\x90-\xaf]|\xbf[\xbe\xbf])")
_ASTRAL_TAIL: Final = re.compile(rb"\xbf[\xbe\xbf]")
_ASTRAL_SECOND: Final = frozenset((0x8F, 0x9F, 0xAF, 0xBF))


def has_noncharacter(utf8: bytes) -> bool:
    """Whether valid UTF-8 ``utf8`` holds a noncharacter (U+FDD0-U+FDEF, U+nFFFE, U+nFFFF)."""
    if _BMP_NONCHARACTER.search(utf8) is not None:
        return True
    search = _ASTRAL_TAIL.search
    m = search(utf8)
    while m is not None:  # overlapping: BF BF BE holds two candidates
        at = m.start()
        if at >= 2 and 0xF0 <= utf8[at - 2] <= 0xF4 and utf8[at - 1] in _ASTRAL_SECOND:
            return True
        m = search(utf8, at + 1)
    return False


@dataclass(frozen=True)
class Validated:
    arguments: dict[str, Any]
    args_digest: str


@dataclass(frozen=True)
class Rejected:
    reason: TerminalReason
    parse_result: str
    validation_result: str


def args_digest(arguments: dict[str, Any]) -> str:
    """The digest a user confirms: sha256 over the canonical JSON (sorted keys) of the object."""
    return _digest(_canonical(arguments))


def _canonical(arguments: dict[str, Any]) -> bytes:
    return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)


def _digest(canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def validate_call(
    text: bytes,
    declaration: ToolDeclaration,
    ctx: ValidationContext | Callable[[], ValidationContext],
) -> Validated | Rejected:
    """Parse once, then schema, then business rules. Never raises for bad input.

    ``ctx`` may be given as a function that makes it: it is then made only for a tool with
    business validators (the only ones to read it).
    """
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return Rejected(TerminalReason.MALFORMED_JSON, f"parse_error at {exc.pos}", "not_run")
    if not isinstance(parsed, dict):
        return Rejected(TerminalReason.MALFORMED_JSON, "top_level_not_object", "not_run")
    canonical = _canonical(parsed)  # every character raw: escaped ones are found here too
    if has_noncharacter(canonical):  # I-JSON (RFC 7493 §2.1), as orjson refuses a surrogate
        return Rejected(TerminalReason.MALFORMED_JSON, "noncharacter_in_string", "not_run")
    quick = declaration.quick_check
    problems: list[str] = []
    if quick is None or not quick(parsed):  # not certainly valid: jsonschema decides
        try:
            problems = [
                f"{error.json_path}: {error.validator}"
                for error in sorted(declaration.validator.iter_errors(parsed), key=_error_order)
            ]
        except RecursionError:  # a recursive schema, an argument nested past what the stack allows
            problems = ["$: nested deeper than the recursion limit lets validation go"]
        except PROCESS_EXCEPTIONS:
            raise
        except BaseException as exc:  # a validator's, format checker's or extension's failure
            problems = [f"$: validator raised {type(exc).__name__}"]
    if problems:
        return Rejected(TerminalReason.SCHEMA_INVALID, "ok", _summary("schema", problems))
    if declaration.business_validators and callable(ctx):
        ctx = ctx()
    for path, check in declaration.business_validators:
        assert isinstance(ctx, ValidationContext)
        try:
            found = [f"{path}: {p}" for p in check(parsed, ctx)]
        except PROCESS_EXCEPTIONS:
            raise
        except BaseException as exc:  # a validator's bug must fail the call, not the worker
            found = [f"{path}: raised {type(exc).__name__}"]
        if found:
            return Rejected(TerminalReason.BUSINESS_INVALID, "ok", _summary("business", found))
    return Validated(parsed, _digest(canonical))


def _error_order(error: Any) -> tuple[str, str]:
    return (str(error.json_path), str(error.validator))


def _summary(kind: str, problems: list[str]) -> str:
    shown = "; ".join(problems[:MAX_PROBLEMS])
    more = f" (+{len(problems) - MAX_PROBLEMS} more)" if len(problems) > MAX_PROBLEMS else ""
    return f"{kind}_invalid: {shown}{more}"
