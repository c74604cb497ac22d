"""The documentation names only what exists: links, anchors, ``make`` targets, CLI commands.

README.md is a front page; the rest lives in docs/*.md, and the pages point at each other and at
files of the repository. Each check reads every page: a relative link must name a file (or folder)
that exists, an ``#anchor`` must be the GitHub slug of a heading of the page it points at, every
``make <target>`` written as code must be a target of the Makefile, and every ``processor <command>
[<subcommand>]`` written as code must be a command (and sub-command) of the CLI's own parser.
"""

from __future__ import annotations

import argparse
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SHELL = {"", "bash", "sh", "shell", "console", "text"}
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
MAKE = re.compile(r"(?<![\w/.-])make[ \t]+([A-Za-z_][\w.-]*)(?![\w=])")
COMMAND = re.compile(r"(?<![\w/.-])processor[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?")
TARGET = re.compile(r"^([A-Za-z0-9_.%/-]+(?:[ \t]+[A-Za-z0-9_.%/-]+)*)[ \t]*:(?!=)", re.M)


def _prose(text: str) -> str:
    """The page without its fenced code blocks and inline code (links live in the prose)."""
    return INLINE_CODE.sub(" ", FENCE.sub("", text))


def _code(text: str) -> str:
    """What the page writes as shell code: fenced blocks (other than another language's: a
    ``python`` block's ``import processor`` is no command) and inline spans, each span on one line,
    one after the other."""
    fenced = [
        m.group(0)
        for m in FENCE.finditer(text)
        if m.group(0).split("\n", 1)[0].strip("`").strip() in SHELL
    ]
    inline = [" ".join(m.group(2).split()) for m in INLINE_CODE.finditer(FENCE.sub("", text))]
    return "\n".join(fenced + inline)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor of a page: its headings' slugs, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", page.read_text())):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    problems = []
    for match in LINK.finditer(_prose(page.read_text())):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            problems.append(f"{page.name}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{page.name}: {target}: no heading with this anchor")
    return problems


@cache
def make_targets() -> frozenset[str]:
    makefile = (ROOT / "Makefile").read_text()
    return frozenset(
        name
        for match in TARGET.finditer(makefile)
        for name in match.group(1).split()
        if not name.startswith(".") or "/" in name
    )


def unknown_make_targets(page: Path) -> list[str]:
    return [
        f"{page.name}: make {name}: not a Makefile target"
        for name in MAKE.findall(_code(page.read_text()))
        if name not in make_targets()
    ]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:  # argparse keeps sub-commands only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


@cache
def cli_tree() -> dict[str, frozenset[str] | None]:
    """Each command of the CLI's parser, built in full by the CLI's own code, with the names of
    its sub-commands (None for a command that has none)."""
    build = importlib.import_module("processor.cli.parser").build_parser
    commands = _subcommands(build())
    assert commands, "the CLI parser has no commands"
    tree: dict[str, frozenset[str] | None] = {}
    for name, parser in commands.items():
        subs = _subcommands(parser)
        tree[name] = frozenset(subs) if subs is not None else None
    return tree


def unknown_commands(page: Path) -> list[str]:
    problems = []
    tree = cli_tree()
    for command, sub in COMMAND.findall(_code(page.read_text())):
        if command not in tree:
            problems.append(f"{page.name}: processor {command}: no such command")
            continue
        subs = tree[command]
        if subs is not None and sub and sub not in subs:
            problems.append(f"{page.name}: processor {command} {sub}: no such sub-command")
    return problems


def test_there_are_pages_and_they_link_to_each_other() -> None:
    names = {page.name for page in PAGES}
    assert {"README.md", "guarantees.md", "operations.md", "library.md", "mcp.md"} <= names
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, f"the front page does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_make_target_named_exists(page: Path) -> None:
    assert unknown_make_targets(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_processor_command_named_exists(page: Path) -> None:
    assert unknown_commands(page) == []


def test_the_front_page_names_the_test_command_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M), ".ci/run no longer runs make test"
    assert "make test" in _code((ROOT / "README.md").read_text())
    assert "test" in make_targets()


def test_the_checks_see_what_they_must_refuse(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n## Two words\n\n[ok](#two-words) [bad](#three-words) [gone](missing.md)\n"
        "[web](https://example.com/x) `make no-such-target` `make test`\n\n"
        "```bash\nprocessor no-such-command --help\nprocessor ctl no-such-sub\n"
        "processor tail dispatch --json\n```\n"
    )
    assert broken_links(page) == [
        "page.md: #three-words: no heading with this anchor",
        "page.md: missing.md: no such file",
    ]
    assert unknown_make_targets(page) == ["page.md: make no-such-target: not a Makefile target"]
    assert unknown_commands(page) == [
        "page.md: processor no-such-command: no such command",
        "page.md: processor ctl no-such-sub: no such sub-command",
    ]


def test_slugs_are_githubs() -> None:
    assert slug("Exactly once to `dispatch`") == "exactly-once-to-dispatch"
    assert slug("Causal control: a command committed before a call's terminal always wins") == (
        "causal-control-a-command-committed-before-a-calls-terminal-always-wins"
    )
    assert slug("State: the local store, its cache, and a lost disk") == (
        "state-the-local-store-its-cache-and-a-lost-disk"
    )
