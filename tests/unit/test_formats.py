"""Format checkers are loaded only for the formats a registry uses, and none is lost.

Each check runs in a fresh interpreter: which modules an import pulls in depends on what the
process imported before.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core.formats import DEFERRED, format_checker, used_formats
from processor.core.registry import Registry


def python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,  # a regression to a super-linear check fails instead of hanging
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_format_jsonschema_checks_is_still_checked_with_its_own_function() -> None:
    out = python(
        """
        from processor.core import formats
        formats.jsonschema_module()
        full = formats._full_format_module().draft202012_format_checker.checkers
        deferred = {f for names in formats.DEFERRED.values() for f in names}
        assert deferred <= set(full) and len(full) >= 19, sorted(full)
        for name, (func, raises) in sorted(full.items()):
            ours = formats.format_checker({name}).checkers
            assert set(ours) == {name}, (name, sorted(ours))
            if name in formats._OWN:  # rewritten on purpose: test_the_regex_format_*
                assert ours[name][0] is formats._OWN[name][0], name
                continue
            assert ours[name][0].__qualname__ == func.__qualname__, name
            assert ours[name][0].__code__.co_code == func.__code__.co_code, name
            assert ours[name][1] == raises, name
        print(len(full))
        """
    )
    assert int(out) >= 19  # Draft 2020-12 defines 19 formats jsonschema checks


def test_the_cli_and_a_registry_without_costly_formats_do_not_load_their_libraries() -> None:
    out = python(
        """
        import sys
        import processor.cli.parser
        assert "jsonschema" not in sys.modules and "aiokafka" not in sys.modules
        from processor.core.registry import Registry
        Registry.from_document({"tools": [{"name": "t", "parameters": {
            "type": "object", "properties": {"when": {"type": "string", "format": "date"}}}}]})
        from processor.core.formats import DEFERRED
        print(sorted(m for m in DEFERRED if m in sys.modules))
        """
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("iri", "https://exämple.org/ü", "not an iri"),
        ("iri-reference", "/ü?q=1", "http://[bad"),
        ("uri", "https://example.org/a", "not a uri"),
        ("uri-reference", "/a?b=c", "http://[bad"),
        ("duration", "P1DT2H", "P1Q"),
        ("email", "a@example.org", "no-at-sign"),
        ("date-time", "2031-05-04T19:30:00Z", "2031-05-04 nope"),
        ("hostname", "example.org", "-bad-.org"),
        ("idn-hostname", "bücher.example", "-bad-.example"),
        ("time", "19:30:00Z", "25:00:00Z"),  # RFC 3339, as Draft 2020-12 (not Draft 3's)
        ("time", "19:30:00+02:00", "19:30:00"),  # a full-time has an offset
        ("uri-template", "/users/{id}", "/users/{id"),
        ("json-pointer", "/a/b~1c", "a/b"),
        ("relative-json-pointer", "1/a", "/a"),
    ],
)
def test_a_registry_checks_each_format_it_uses(fmt: str, good: str, bad: str) -> None:
    registry = Registry.from_document(
        {"tools": [{"name": "t", "parameters": {"type": "object", "properties": {
            "v": {"type": "string", "format": fmt}}}}]}
    )  # fmt: skip
    validator = registry.tools[0].validator
    assert list(validator.iter_errors({"v": good})) == []
    assert [e.validator for e in validator.iter_errors({"v": bad})] == ["format"]


def test_used_formats_walks_the_whole_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"format": "uri"}, "format": {"type": "string"}},
        "$defs": {"d": {"anyOf": [{"format": "duration"}, {"format": "email"}]}},
    }
    assert used_formats(schema) == {"uri", "duration", "email"}


def test_deferred_formats_are_checked_and_unknown_formats_pass() -> None:
    checker = format_checker({"iri", "no-such-format"})
    assert not checker.conforms("not an iri", "iri")
    assert checker.conforms("anything", "no-such-format")
    assert {f for names in DEFERRED.values() for f in names} >= {"iri", "duration", "uri"}


CHECKER_NAMES = """
    import json, jsonschema
    fmt = jsonschema._format
    names = {d: sorted(c.checkers) for d, c in fmt._draft_checkers.items()}
    names["class-wide"] = sorted(jsonschema.FormatChecker.checkers)
    print(json.dumps(names))
"""


def test_jsonschema_keeps_every_format_for_its_other_users() -> None:
    """jsonschema is one module per process: hiding a library while importing it must not take
    formats from a gateway that embeds the package and validates with jsonschema's own
    checkers (``Draft202012Validator.FORMAT_CHECKER``, ``FormatChecker()``)."""
    names = textwrap.dedent(CHECKER_NAMES)
    plain = python(names)
    ours = python("from processor.core import formats\nformats.jsonschema_module()\n" + names)
    assert ours == plain


def test_a_lent_format_loads_its_library_at_its_first_check_and_checks_as_jsonschema() -> None:
    out = python(
        """
        import sys
        from processor.core import formats
        jsonschema = formats.jsonschema_module()
        assert "rfc3987_syntax" not in sys.modules and "isoduration" not in sys.modules
        V = jsonschema.Draft202012Validator
        iri = V({"format": "iri"}, format_checker=V.FORMAT_CHECKER)
        assert iri.is_valid("https://exämple.org/ü") and not iri.is_valid("not an iri")
        assert "rfc3987_syntax" in sys.modules
        assert V.FORMAT_CHECKER.checkers["iri"][0].__qualname__ == "is_iri"  # its own, now
        checker = jsonschema.FormatChecker()  # the class-wide map, as created before any check
        assert checker.conforms("P1DT2H", "duration") and not checker.conforms("P1Q", "duration")
        assert checker.conforms("https://example.org/a", "uri")
        assert not checker.conforms("not a uri", "uri")
        print("ok")
        """
    )
    assert out.strip() == "ok"


# --- iri and iri-reference: RFC 3987 as one RE2 expression ------------------------------------

IRI_ALPHABET = [
    *"aZ09:/?#@!$&'()*+,;=%-._~ vF.<>\"{|\\^`",
    "é", "\u00a0", "\ue000", "\ufffe", "\x7f", "\x00", "\ud7ff", "\uf8ff", "\uf900", "\ufdd0",
    "%4", "%41", "255", "256", "1.2.3.4", "ffff", "http://", "//",
]  # fmt: skip


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(IRI_ALPHABET), max_size=10).map("".join))
def test_the_iri_formats_agree_with_rfc3987_syntax(text: str) -> None:
    """Without IP literals and characters past U+FFFF, where rfc3987_syntax departs from the
    RFC (below), both decide every string alike."""
    import rfc3987_syntax

    from processor.core.formats import is_iri, is_iri_reference

    assert is_iri(text) is bool(rfc3987_syntax.is_valid_syntax_iri(text))
    assert is_iri_reference(text) is bool(rfc3987_syntax.is_valid_syntax_iri_reference(text))


@pytest.mark.parametrize(
    ("text", "iri", "reference"),
    [
        ("http://example.com/a?b#c", True, True),
        ("http://[1:2:3:4:5:6:7:8]/", True, True),
        ("http://[::ffff:1.2.3.4]", True, True),
        ("http://[v1.x]/", True, True),
        ("urn:isbn:123", True, True),
        ("http://é.com/ü?q=ß#ñ", True, True),
        ("//host/p", False, True),
        ("rel/path", False, True),
        ("", False, True),
        ("http://[1::2::3]/", False, False),
        ("http://[::256.1.1.1]/", False, False),
        ("http://[fe80::1%25eth0]/", False, False),  # RFC 6874 zones are not RFC 3987
        ("http://x/%zz", False, False),
        ("http://a b", False, False),
        ("http://x/\ud800", False, False),  # a lone surrogate
        # rfc3987_syntax refuses these; RFC 3987 allows them (ucschar goes to U+EFFFD, and
        # "::1" is an IPv6address): the check follows the RFC
        ("http://x/\U0001f600", True, True),
        ("http://[::1]/", True, True),
        ("//[::1]", False, True),
    ],
)
def test_the_iri_formats_follow_rfc_3987(text: str, iri: bool, reference: bool) -> None:
    checker = format_checker({"iri", "iri-reference"})
    assert checker.conforms(text, "iri") is iri
    assert checker.conforms(text, "iri-reference") is reference


def test_the_iri_formats_are_linear_and_do_not_load_rfc3987_syntax() -> None:
    out = python(
        """
        import sys, time
        from processor.core.formats import format_checker
        checker = format_checker({"iri", "iri-reference"})
        text = "http://x/" + "a" * (1 << 20)  # rfc3987_syntax: about 15 minutes
        assert checker.conforms(text, "iri") and checker.conforms(text, "iri-reference")
        assert not checker.conforms(text + " ", "iri")
        print("rfc3987_syntax" in sys.modules)
        """
    )
    assert out.strip() == "False"
