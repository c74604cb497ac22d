"""Text that hides or imitates: hidden characters, mixed scripts, and confusable names.

Owns the checks ``processor tools import-mcp`` runs on what an MCP server lists before a person
reviews it (:func:`processor.core.mcp_import.import_entries`):

* :func:`hidden_characters`: the characters of a text a reader does not see, every one Python
  does not call printable (``str.isprintable``: controls, format characters such as the
  zero-width U+200B to U+200F, U+2060 to U+2064 and U+FEFF, the bidirectional overrides and
  isolates U+202A to U+202E and U+2066 to U+2069, the invisible tag characters U+E0000 to
  U+E007F, line and paragraph separators, spaces other than U+0020, private-use and
  unassigned code points), except those named in ``allowed`` (a description's newlines and tabs);
* :func:`scripts`: the scripts of a name's letters, approximated by the first word of each
  letter's Unicode name (``LATIN``, ``CYRILLIC``, ``GREEK``, …): a name with letters of two
  scripts (``tr\u0430nsfer``, with a Cyrillic small a) is suspect;
* :func:`skeleton`: a small confusable skeleton in the spirit of Unicode TR39: NFKC, then each
  character in :data:`PROTOTYPES` replaced by the Latin letter it looks like (and that one by
  its own, so a Cyrillic capital I meets a Latin ``I`` and ``l``), then the
  sequences ``rn`` → ``m`` and ``vv`` → ``w``. Two different names with one skeleton look alike
  (:func:`confusable_pairs`). The table holds the Cyrillic and Greek letters drawn like Latin
  ones and the digits and capitals drawn like ``l`` and ``o``; it is deliberately small (no
  dependency), so a miss is possible and only a warning rides on it.

Pure: no IO.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Final

__all__ = [
    "PROTOTYPES",
    "confusable_pairs",
    "describe",
    "hidden_characters",
    "scripts",
    "skeleton",
]

_TABLE: Final = (
    # Cyrillic drawn like Latin (code points, so the source itself shows no lookalike)
    "0430:a 0435:e 043E:o 0440:p 0441:c 0443:y 0445:x 0456:i 0458:j 0455:s 0501:d 04BB:h "
    "04CF:l 051B:q 051D:w 0410:A 0412:B 0415:E 041A:K 041C:M 041D:H 041E:O 0420:P 0421:C "
    "0422:T 0425:X 0406:I 0408:J 0405:S "
    # Greek drawn like Latin
    "03B1:a 03BF:o 03BD:v 03B9:i 03C1:p 03BA:k 0391:A 0392:B 0395:E 0396:Z 0397:H 0399:I "
    "039A:K 039C:M 039D:N 039F:O 03A1:P 03A4:T 03A5:Y 03A7:X "
    # Latin and digits drawn alike: 1 I | as l, 0 O as o
    "0031:l 0049:l 007C:l 0030:o 004F:o"
)
PROTOTYPES: Final[dict[str, str]] = {
    chr(int(code, 16)): latin for code, latin in (pair.split(":") for pair in _TABLE.split())
}
"""Characters and the Latin letter each is drawn like (see the module docstring)."""

_SEQUENCES: Final = (("rn", "m"), ("vv", "w"))


def hidden_characters(text: str, allowed: str = "") -> list[str]:
    """The distinct characters of ``text`` a reader does not see, in order of appearance."""
    found: list[str] = []
    for char in text:
        if not char.isprintable() and char not in allowed and char not in found:
            found.append(char)
    return found


def describe(chars: Iterable[str]) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE, U+200B ZERO WIDTH SPACE`` (at most five named)."""
    chars = list(chars)
    shown = [f"U+{ord(c):04X} {_name(c)}" for c in chars[:5]]
    more = f" and {len(chars) - 5} more" if len(chars) > 5 else ""
    return ", ".join(shown) + more


_CATEGORIES: Final = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Cs": "a surrogate",
}


def _name(char: str) -> str:
    category = unicodedata.category(char)
    return unicodedata.name(char, _CATEGORIES.get(category, category))


def scripts(name: str) -> frozenset[str]:
    """The scripts of the letters of ``name`` (first word of each letter's Unicode name)."""
    return frozenset(unicodedata.name(c, "UNKNOWN").split()[0] for c in name if c.isalpha())


def skeleton(name: str) -> str:
    """The confusable skeleton of ``name``: equal skeletons look alike."""
    text = "".join(_prototype(c) for c in unicodedata.normalize("NFKC", name))
    for sequence, prototype in _SEQUENCES:
        text = text.replace(sequence, prototype)
    return text


def _prototype(char: str) -> str:
    once = PROTOTYPES.get(char, char)
    return PROTOTYPES.get(once, once)  # Cyrillic I -> I -> l, Greek O -> O -> o


def confusable_pairs(names: Iterable[str], others: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Each pair of different names that look alike: among ``names``, and between one of
    ``names`` and one of ``others`` (sorted, each pair once)."""
    ours = sorted(set(names))
    everyone = sorted(set(ours) | set(others))
    by_skeleton: dict[str, list[str]] = {}
    for name in everyone:
        by_skeleton.setdefault(skeleton(name), []).append(name)
    pairs: set[tuple[str, str]] = set()
    mine = set(ours)
    for group in by_skeleton.values():
        for i, first in enumerate(group):
            for second in group[i + 1 :]:
                if first in mine or second in mine:
                    pairs.add((first, second))
    return sorted(pairs)
