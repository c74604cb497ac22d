"""What `processor tools import-mcp` writes for review (issue 38, items 9, 10 and 12): hidden
text refused or escaped, lookalike names warned of, bare names, and what a re-import changes."""

from __future__ import annotations

from typing import Any

import pytest

from processor.core.lookalikes import confusable_pairs, hidden_characters, scripts, skeleton
from processor.core.mcp_import import import_entries, reimport_changes
from processor.core.mcp_pins import ToolDefinition
from processor.core.registry import Registry
from processor.observability.terminal import printable

SCHEMA = {"type": "object", "properties": {"slot": {"type": "string", "description": "A slot."}}}
CYRILLIC_A = "\u0430"
HIDDEN = {
    "tag": "\U000e0049\U000e0067\U000e006e",  # invisible "Ign…"
    "zero-width": "\u200b",
    "bidi override": "\u202e",
    "bidi isolate": "\u2066",
    "word joiner": "\u2060",
    "byte order mark": "\ufeff",
    "control": "\x1b",
}


def tool(name: str = "book", **changes: Any) -> ToolDefinition:
    base: dict[str, Any] = {
        "name": name,
        "description": "Book a slot.",
        "input_schema": SCHEMA,
        "annotations": {"destructiveHint": False},
    }
    base.update(changes)
    return ToolDefinition(**base)


@pytest.mark.parametrize("kind", sorted(HIDDEN))
def test_a_name_hiding_characters_refuses_its_tool(kind: str) -> None:
    result = import_entries("srv", [tool(f"bo{HIDDEN[kind]}ok"), tool("fine")], escape=printable)
    assert [e["name"] for e in result.entries] == ["fine"]
    assert len(result.refused) == 1 and "its name hides characters" in result.refused[0]


@pytest.mark.parametrize("kind", sorted(HIDDEN))
def test_hidden_text_in_a_description_is_written_escaped_with_a_warning(kind: str) -> None:
    text = f"Book a slot.{HIDDEN[kind]} Then more.\nSecond line\twith a tab."
    schema = {"type": "object", "title": f"T{HIDDEN[kind]}", "properties": SCHEMA["properties"]}
    definition = tool(description=text, input_schema=schema)
    result = import_entries("srv", [definition], escape=printable)
    assert result.refused == []
    entry = result.entries[0]
    written = entry["description"] + entry["parameters"]["title"]
    assert hidden_characters(written, "\n\t") == []  # nothing a reader cannot see
    assert "\n" in entry["description"] and "\t" in entry["description"]  # prose kept
    assert printable(HIDDEN[kind]) in entry["description"]
    assert any("description hides characters" in w for w in result.warnings)
    assert any("inputSchema's text hides characters at /title" in w for w in result.warnings)
    # the digest pins what the server sent, not what was written for review
    assert entry["mcp"]["digest"] == definition.digest
    # without an escape (a library caller), such a tool is refused instead
    strict = import_entries("srv", [definition])
    assert strict.entries == [] and "description hides characters" in strict.refused[0]


def test_hidden_text_in_a_schema_value_or_key_refuses_the_tool() -> None:
    as_value = {"type": "object", "properties": {"slot": {"enum": ["a\u202eb"]}}}
    as_key = {"type": "object", "properties": {"sl\u200bot": {"type": "string"}}}
    # a "description" inside a value (a const object) is data: escaping it would change it
    in_const = {"type": "object", "properties": {"o": {"const": {"description": "x\u200b"}}}}
    result = import_entries(
        "srv",
        [
            tool("v", input_schema=as_value),
            tool("k", input_schema=as_key),
            tool("c", input_schema=in_const),
        ],
        escape=printable,
    )
    assert result.entries == []
    assert "inputSchema hides characters at /properties/o/const/description" in result.refused[0]
    assert "inputSchema hides characters at /properties (a key)" in result.refused[1]
    assert "inputSchema hides characters at /properties/slot/enum/0" in result.refused[2]


def test_lookalike_names_are_warned_of() -> None:
    homoglyph = f"tr{CYRILLIC_A}nsfer"
    result = import_entries("srv", [tool("transfer"), tool(homoglyph)], escape=printable)
    assert len(result.entries) == 2  # a warning: the reviewer decides
    assert any("mixes scripts (CYRILLIC, LATIN)" in w for w in result.warnings)
    assert any("look alike" in w and "tr\\u0430nsfer" in w for w in result.warnings)
    assert scripts("transfer") == {"LATIN"}
    assert skeleton(homoglyph) == skeleton("transfer")
    assert skeleton("\u0406tem") == skeleton("Item") == skeleton("ltem")  # Cyrillic I, l
    assert skeleton("\uff54ransfer") == skeleton("transfer")  # fullwidth, by NFKC
    assert confusable_pairs(["rnail"], ["mail", "other"]) == [("mail", "rnail")]
    assert confusable_pairs(["transfer", "book"]) == []


def test_no_namespace_declares_bare_tools() -> None:
    result = import_entries("srv", [tool("book")], namespace_key=False)
    assert "namespace" not in result.entries[0]
    registry = Registry.from_document({"tools": result.entries})
    assert registry.resolve("book") is not None and registry.resolve("book", "srv") is None


def entry(name: str, digest: str = "a", confirm: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "bookings",
        "requires_confirmation": confirm,
        "mcp": {"server": "bookings", "digest": digest},
        **extra,
    }


def test_reimport_changes_name_what_a_reimport_changes() -> None:
    before = [entry("book_slot"), entry("cancel"), entry("list", allowed_tenants=["t1"])]
    after = [entry("book_slot", digest="b", confirm=False), entry("list"), entry("export")]
    assert reimport_changes(before, after) == [
        "removed: 'bookings.cancel'",
        "added: 'bookings.export'",
        "changed: 'bookings.book_slot': its definition (mcp.digest); "
        "requires_confirmation turned off",
        "changed: 'bookings.list': reviewed keys allowed_tenants",
    ]
    assert reimport_changes(before, before) == []
    bare = [{k: v for k, v in e.items() if k != "namespace"} for e in before]
    assert "removed: 'bookings.book_slot'" in reimport_changes(before, bare)


def test_a_schema_too_deep_to_walk_is_refused_not_a_crash() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"a": deep}}
    result = import_entries("srv", [tool("deep", input_schema=deep)], escape=printable)
    assert result.entries == [] and "nested too deeply" in result.refused[0]


def test_every_pinned_member_is_shown_for_review_and_hides_nothing() -> None:
    """The digest pins the whole definition (outputSchema, title, _meta, …): what a reviewer
    approves shows all of it, under ``mcp.definition``, and hidden text there refuses the tool
    as it does in the inputSchema."""
    output = {"type": "object", "properties": {"ok": {"type": "boolean", "description": "Done."}}}
    wire = {
        "name": "book",
        "description": "Book a slot.",
        "inputSchema": SCHEMA,
        "outputSchema": output,
        "title": "Book",
        "_meta": {"x": 1},
    }
    [entry] = import_entries("srv", [ToolDefinition.from_wire(wire)], escape=printable).entries
    assert entry["mcp"]["definition"] == {
        "outputSchema": output,
        "title": "Book",
        "_meta": {"x": 1},
    }
    Registry.from_document({"tools": [entry]})  # the registry loads what the import wrote
    hidden = {**wire, "_meta": {"note": f"ignore{HIDDEN['tag']}"}}
    result = import_entries("srv", [ToolDefinition.from_wire(hidden)], escape=printable)
    assert result.entries == []
    assert "its definition hides characters at /_meta/note" in result.refused[0]
    [plain] = import_entries("srv", [tool()], escape=printable).entries
    assert "definition" not in plain["mcp"]
