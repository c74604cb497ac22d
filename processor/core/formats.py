"""jsonschema, imported cheaply, and format checkers built for the formats a registry uses.

Importing ``jsonschema`` imports every optional format library at once; one of them,
``rfc3987_syntax``, builds a grammar at import (over a second here), which made every command
that touches a registry slow to start. This module owns that cost:

* :func:`jsonschema_module` imports jsonschema with the heavy optional format libraries of
  :data:`DEFERRED` hidden, so their checks are not registered yet;
* :func:`format_checker` builds a :class:`~jsonschema.FormatChecker` limited to the formats a
  schema uses (:func:`used_formats`). When one of them belongs to a deferred library, jsonschema's
  own format module is loaded once more, in full, under a private name, and its checker for that
  format (the same function, the same exceptions) is added. No format check is lost; one is
  rewritten here, ``regex`` (:func:`is_regex`), whose value is a pattern that jsonschema's
  check compiles, at a cost a hostile argument sets;
* jsonschema's own checkers (``FormatChecker()``, each draft's ``FORMAT_CHECKER``) get the
  deferred formats back as stand-ins that load their library at their first check
  (:func:`_lend_deferred`): jsonschema is one module per process, and a program that embeds
  this package and uses jsonschema itself must not lose ``uri`` because a registry loaded first.

A format jsonschema does not know stays unchecked, as with ``FormatChecker()``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import re._parser as _sre_parse  # type: ignore[import-not-found]  # re's own parser
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from jsonschema import FormatChecker

#: optional format library → the Draft 2020-12 formats jsonschema checks with it (loaded only
#: when used)
DEFERRED: Final[Mapping[str, tuple[str, ...]]] = {
    # builds a grammar at import, over a second; the registry checks iri with is_iri instead,
    # so only jsonschema's own checkers (the stand-ins of _lend_deferred) ever load it
    "rfc3987_syntax": ("iri", "iri-reference"),
    "isoduration": ("duration",),
    "rfc3986_validator": ("uri", "uri-reference"),
}
_FULL_NAME: Final = "processor.core._jsonschema_format_full"


def jsonschema_module() -> ModuleType:
    """``jsonschema``, imported (once) without the deferred format libraries."""
    loaded = sys.modules.get("jsonschema")
    if loaded is not None:
        return loaded
    hidden = [name for name in DEFERRED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # makes `import name` fail
    try:
        module = importlib.import_module("jsonschema")
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    _lend_deferred(module, hidden)
    return module


#: the drafts whose checker jsonschema gives each deferred format (its ``_checks_drafts``);
#: the class-wide ``FormatChecker.checkers`` gets every one of them too
_DRAFTS: Final[Mapping[str, tuple[str, ...]]] = {
    "uri": ("draft3", "draft4", "draft6", "draft7", "draft201909", "draft202012"),
    "uri-reference": ("draft6", "draft7", "draft201909", "draft202012"),
    "iri": ("draft7", "draft201909", "draft202012"),
    "iri-reference": ("draft7", "draft201909", "draft202012"),
    "duration": ("draft201909", "draft202012"),
}


def _lend_deferred(jsonschema: ModuleType, hidden: Iterable[str]) -> None:
    """Give jsonschema's own checkers back the formats hiding a library took from them.

    jsonschema is one module per process: a gateway that embeds this package and validates
    with ``Draft202012Validator.FORMAT_CHECKER`` or ``FormatChecker()`` must not lose ``uri``
    because a registry was loaded first. Each such format gets a stand-in that, at its first
    check, loads the library (:func:`_full_format_module`), puts jsonschema's own function in
    its place, and checks. A check failing inside a stand-in has no ``cause``; the result is the
    same.
    """
    fmt = jsonschema._format
    for library in hidden:
        if importlib.util.find_spec(library) is None:
            continue  # not installed: jsonschema would not have checked these formats either
        for name in DEFERRED[library]:
            for draft in _DRAFTS[name]:
                owner = fmt._draft_checkers[draft]
                if name not in owner.checkers:
                    owner.checkers[name] = (_stand_in(owner, draft, name), ())
            if name not in fmt.FormatChecker.checkers:
                fmt.FormatChecker.checkers[name] = (_stand_in(fmt.FormatChecker, None, name), ())


def _stand_in(owner: Any, draft: str | None, name: str) -> Callable[[object], bool]:
    def check(instance: object) -> bool:
        full = _full_format_module()
        source = full._draft_checkers[draft] if draft else full.FormatChecker
        func, raises = source.checkers[name]
        owner.checkers[name] = (func, raises)  # from now on, jsonschema's own function
        try:
            return bool(func(instance))
        except raises:
            return False

    check.lent = True  # type: ignore[attr-defined]  # format_checker looks through it
    return check


def used_formats(schema: Any) -> frozenset[str]:
    """Every string value of a ``format`` keyword anywhere in ``schema`` (a superset is fine)."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            value = node.get("format")
            if isinstance(value, str):
                found.add(value)
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return frozenset(found)


def format_checker(formats: Iterable[str]) -> FormatChecker:
    """A FormatChecker checking exactly ``formats`` (those Draft 2020-12 defines).

    The checks are Draft 2020-12's own (``Draft202012Validator.FORMAT_CHECKER``), not those of
    ``FormatChecker()``: its class-wide map holds, for each name, the function registered last
    for any draft, so its ``time`` is Draft 3's ``%H:%M:%S`` (which refuses ``19:30:00Z`` and
    accepts a time without an offset) and it checks Draft 3's ``color``.
    """
    jsonschema = jsonschema_module()
    wanted = set(formats)
    known = {  # without the stand-ins of _lend_deferred
        name: entry
        for name, entry in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers.items()
        if not getattr(entry[0], "lent", False)
    }
    checker: FormatChecker = jsonschema.FormatChecker(())
    missing = (wanted - set(known) - set(_OWN)) & deferred_formats()
    full = _full_format_module().draft202012_format_checker.checkers if missing else {}
    for name in sorted(wanted):
        found = _OWN.get(name) or known.get(name) or full.get(name)
        if found is not None:
            func, raises = found
            checker.checks(name, raises=raises)(func)
    return checker


def is_regex(instance: object) -> bool:
    """The ``regex`` format: ``instance`` is a pattern Python's ``re`` can parse.

    jsonschema's own check compiles the argument with ``re.compile``: a hostile 540 KB pattern
    took 2 s to compile, ``re`` keeps its last 512 compiled programs (100 such arguments held
    500 MB), and a pattern nested a few thousand groups deep raised ``RecursionError`` out of
    the check. This one accepts the same syntax but only parses it: time linear in its length,
    nothing kept after the check, and nesting too deep to parse is invalid. A construct only
    the compiler refuses (a variable-width lookbehind, valid ECMA-262) passes.
    """
    if not isinstance(instance, str):
        return True
    try:
        _sre_parse.parse(instance)
    except (re.error, RecursionError, OverflowError, ValueError):
        return False
    return True


def _iri_patterns() -> tuple[str, str]:
    """The RFC 3987 grammar of an IRI and of an IRI reference (section 2.2), as regular
    expressions for RE2. IPv4address is left out of ``ihost``: ``ireg-name`` matches it."""
    ucs = (
        r"\x{A0}-\x{D7FF}\x{F900}-\x{FDCF}\x{FDF0}-\x{FFEF}\x{10000}-\x{1FFFD}"
        r"\x{20000}-\x{2FFFD}\x{30000}-\x{3FFFD}\x{40000}-\x{4FFFD}\x{50000}-\x{5FFFD}"
        r"\x{60000}-\x{6FFFD}\x{70000}-\x{7FFFD}\x{80000}-\x{8FFFD}\x{90000}-\x{9FFFD}"
        r"\x{A0000}-\x{AFFFD}\x{B0000}-\x{BFFFD}\x{C0000}-\x{CFFFD}\x{D0000}-\x{DFFFD}"
        r"\x{E1000}-\x{EFFFD}"
    )
    private = r"\x{E000}-\x{F8FF}\x{F0000}-\x{FFFFD}\x{100000}-\x{10FFFD}"
    unreserved = r"A-Za-z0-9\-._~"
    sub_delims = r"!$&'()*+,;="
    pct = r"%[0-9A-Fa-f]{2}"
    ipchar = f"(?:[{unreserved}{ucs}{sub_delims}:@]|{pct})"
    segment = f"{ipchar}*"
    segment_nz = f"{ipchar}+"
    segment_nz_nc = f"(?:[{unreserved}{ucs}{sub_delims}@]|{pct})+"
    userinfo = f"(?:[{unreserved}{ucs}{sub_delims}:]|{pct})*"
    reg_name = f"(?:[{unreserved}{ucs}{sub_delims}]|{pct})*"
    h16 = "[0-9A-Fa-f]{1,4}"
    octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
    ls32 = f"(?:{h16}:{h16}|{octet}\\.{octet}\\.{octet}\\.{octet})"
    ipv6 = "|".join(
        [
            f"(?:{h16}:){{6}}{ls32}",
            f"::(?:{h16}:){{5}}{ls32}",
            f"(?:{h16})?::(?:{h16}:){{4}}{ls32}",
            f"(?:(?:{h16}:){{0,1}}{h16})?::(?:{h16}:){{3}}{ls32}",
            f"(?:(?:{h16}:){{0,2}}{h16})?::(?:{h16}:){{2}}{ls32}",
            f"(?:(?:{h16}:){{0,3}}{h16})?::{h16}:{ls32}",
            f"(?:(?:{h16}:){{0,4}}{h16})?::{ls32}",
            f"(?:(?:{h16}:){{0,5}}{h16})?::{h16}",
            f"(?:(?:{h16}:){{0,6}}{h16})?::",
        ]
    )
    future = f"v[0-9A-Fa-f]+\\.[{unreserved}{sub_delims}:]+"
    host = f"(?:\\[(?:{ipv6}|{future})\\]|{reg_name})"
    authority = f"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    abempty = f"(?:/{segment})*"
    absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    rootless = f"{segment_nz}(?:/{segment})*"
    noscheme = f"{segment_nz_nc}(?:/{segment})*"
    tail = f"(?:\\?(?:{ipchar}|[{private}/?])*)?(?:#(?:{ipchar}|[/?])*)?"
    iri = f"[A-Za-z][A-Za-z0-9+\\-.]*:(?://{authority}{abempty}|{absolute}|{rootless}|){tail}"
    relative = f"(?://{authority}{abempty}|{absolute}|{noscheme}|){tail}"
    return iri, f"{iri}|{relative}"


@functools.cache
def re2_options() -> Any:
    """RE2's options for every expression here and in :mod:`processor.core.toolschema`: only
    whether it matches (no submatches to compute), and no refused pattern printed to stderr."""
    import re2  # noqa: PLC0415  # only when a schema has a pattern or checks IRIs

    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    return options


@functools.cache
def _iri_regexes() -> tuple[Any, Any]:
    import re2  # noqa: PLC0415  # only when a schema checks IRIs

    iri, reference = _iri_patterns()
    return re2.compile(iri, re2_options()), re2.compile(reference, re2_options())


def _fullmatch(regex: Any, instance: str) -> bool:
    try:
        return regex.fullmatch(instance) is not None
    except UnicodeEncodeError:  # a lone surrogate: not an IRI
        return False


def is_iri(instance: object) -> bool:
    """The ``iri`` format (RFC 3987 ``IRI``), in time linear in the value.

    jsonschema checks it with ``rfc3987_syntax``, a parser generated from the grammar that took
    0.8 ms a character (6.7 s for 8,000 characters, about 15 minutes for the 1 MiB a call may
    hold). This is the same grammar as an RE2 expression; a test compares the two.
    """
    return not isinstance(instance, str) or _fullmatch(_iri_regexes()[0], instance)


def is_iri_reference(instance: object) -> bool:
    """The ``iri-reference`` format (RFC 3987 ``IRI-reference``); see :func:`is_iri`."""
    return not isinstance(instance, str) or _fullmatch(_iri_regexes()[1], instance)


#: formats checked here instead of by jsonschema's function (see each function)
_OWN: Final[Mapping[str, tuple[Callable[[object], bool], tuple[type[Exception], ...]]]] = {
    "regex": (is_regex, ()),
    "iri": (is_iri, ()),
    "iri-reference": (is_iri_reference, ()),
}


def deferred_formats() -> frozenset[str]:
    return frozenset(name for names in DEFERRED.values() for name in names)


def _full_format_module() -> ModuleType:
    """jsonschema's ``_format`` module executed again with every optional library importable."""
    module = sys.modules.get(_FULL_NAME)
    if module is not None:
        return module
    origin = jsonschema_module()._format.__file__
    spec = importlib.util.spec_from_file_location(_FULL_NAME, origin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_FULL_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_FULL_NAME]
        raise
    return module
