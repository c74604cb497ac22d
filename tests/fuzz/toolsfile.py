"""Fuzz target ``toolsfile``: hostile tools files through :func:`processor.registry_file.load_registry`.

A tools file is the operator's, but every bad input gets a clear error: the CLI turns a
``RegistryError`` into one line naming the file, the tool and the reason, and anything else
into an internal error ("please report it"). Each case takes the bundled
``examples/tools.yaml`` (or a random generated schema of :mod:`tests.fuzz.schemas`) and changes
it: a value replaced by any JSON value or by a random schema, keys deleted or added, a tool
doubled, values shared between places (YAML writes those as anchors and aliases, nested aliases
repeating them many times), a value made to contain itself, nesting a few hundred levels deep;
then writes it as YAML or JSON, perhaps with a few characters changed, and loads it.

An escape is anything but a ``RegistryError`` out of the load, or a registry whose validation of
an argument raises.
"""

from __future__ import annotations

import copy
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import orjson
import yaml

from processor.core.errors import RegistryError
from processor.core.registry import SelfContaining, expanded_size
from processor.core.validation import validate_call
from processor.registry_file import load_registry
from tests.fuzz import schemas

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tools.yaml"
_FILE = Path(tempfile.gettempdir()) / f"toolsfile-fuzz-{id(EXAMPLE)}"


class ToolsfileEscape(AssertionError):
    """The load raised something other than a RegistryError, or a loaded tool's validation did."""


def _containers(value: Any, found: list[Any]) -> list[Any]:
    if isinstance(value, dict | list) and len(found) < 400:
        found.append(value)
        for member in value.values() if isinstance(value, dict) else value:
            _containers(member, found)
    return found


def _replace_somewhere(rng: random.Random, doc: Any, new: Any) -> None:
    containers = _containers(doc, [])
    target = rng.choice(containers)
    if isinstance(target, dict):
        target[rng.choice([*target, "parameters", "name", "x"]) if target else "x"] = new
    elif target:
        target[rng.randrange(len(target))] = new
    else:
        target.append(new)


def _deep(rng: random.Random) -> Any:
    node: Any = {"type": "object"}
    for _ in range(rng.choice([50, 150, 300, 600])):
        node = (
            {"type": "object", "properties": {"a": node}}
            if rng.random() < 0.5
            else {"allOf": [node]}
        )
    return node


def _shared(rng: random.Random, doc: Any) -> None:
    """Nested sharing: a value repeated ``fan`` times at ``levels`` levels (aliases in YAML)."""
    node: Any = {"type": "object", "properties": {"x": {"type": "string"}}}
    for _ in range(rng.randint(1, 7)):
        node = {"allOf": [node] * rng.randint(2, 9)}
    _replace_somewhere(rng, doc, node)


def mutate_doc(rng: random.Random, doc: Any) -> Any:
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.25:
            _replace_somewhere(rng, doc, _random_json(rng))
        elif roll < 0.4:
            _replace_somewhere(rng, doc, schemas.render(schemas.random_tool_schema(rng), "re2"))
        elif roll < 0.5:
            containers = [c for c in _containers(doc, []) if isinstance(c, dict) and c]
            if containers:
                target = rng.choice(containers)
                del target[rng.choice(list(target))]
        elif roll < 0.6 and isinstance(doc, dict) and isinstance(doc.get("tools"), list):
            tools = doc["tools"]
            if tools:
                tools.append(copy.deepcopy(rng.choice(tools)))
        elif roll < 0.7:
            _shared(rng, doc)
        elif roll < 0.78:
            containers = _containers(doc, [])
            target = rng.choice(containers)
            if isinstance(target, dict):
                target[rng.choice(["properties", "items", "x", "parameters"])] = target
            else:
                target.append(target)  # contains itself
        elif roll < 0.86:
            _replace_somewhere(rng, doc, _deep(rng))
        else:
            _replace_somewhere(rng, doc, rng.choice([1e308, -(2**70), "", "\x00", [], {}, None]))
    return doc


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        names = ["type", "properties", "name", "parameters", "$ref", "pattern", "format", ""]
        return {rng.choice(names): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if depth < 3 and roll < 0.45:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([None, True, False, 0, -1, 2**63, 1.5, "", "x", "object", "#", "#/$defs/x",
                       "^(a+)+$", "(?=x)", "date-time", "regex", "\x00"])  # fmt: skip


def _text(rng: random.Random, doc: Any) -> str:
    """YAML (which writes shared and self-containing values as anchors and aliases) or, for a
    document small when written out in full, JSON."""
    try:
        small = expanded_size(doc, 100_000) <= 100_000
    except SelfContaining:
        small = False
    if small and rng.random() < 0.25:
        try:
            text = json.dumps(doc)
        except (ValueError, RecursionError):  # nested too deep for json's writer
            text = yaml.safe_dump(doc, allow_unicode=True)
    else:
        text = yaml.safe_dump(doc, allow_unicode=True)
    if rng.random() < 0.2:
        chars = list(text)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(chars) + 1)
            chars.insert(i, rng.choice(list("{}[]:,-&*!|>'\"\n \t#%@`")))
        text = "".join(chars)
    return text


def toolsfile_case(rng: random.Random, stats: Any) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    if rng.random() < 0.2:
        doc = {"tools": [{"name": "g", "parameters": schemas.render(
            schemas.random_tool_schema(rng), "re2")}]}  # fmt: skip
    try:
        text = _text(rng, mutate_doc(rng, doc))
    except RecursionError:
        stats["toolsfile.unwritable"] += 1  # the harness could not write it: not a case
        return
    _FILE.write_text(text, encoding="utf-8")
    try:
        registry = load_registry(_FILE)
    except RegistryError:
        stats["toolsfile.refused"] += 1
        return
    except BaseException as exc:  # the oracle: anything else escapes
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ToolsfileEscape(f"load raised {type(exc).__name__}: {str(exc)[:200]}") from None
    stats["toolsfile.loaded"] += 1
    for tool in registry.tools:
        value = schemas.satisfying(rng, tool.parameters, tool.parameters.get("$defs") or {})
        try:
            text_value = orjson.dumps(value if isinstance(value, dict) else {"v": value})
        except TypeError:  # a const of the file with a lone surrogate: no argument holds one
            continue
        try:
            validate_call(text_value, tool, _no_context)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise ToolsfileEscape(
                f"validating a call of {tool.name!r} raised {type(exc).__name__}"
            ) from None


def _no_context() -> Any:
    raise AssertionError("business validators are not loaded here")
