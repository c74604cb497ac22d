"""Flattened tool names: one provider-safe bare name for each namespaced tool name. No IO.

Only OpenAI Responses can send a namespace with a call. Anthropic, Chat Completions, Gemini and
Bedrock take tool names of ``[a-zA-Z0-9_-]{1,64}`` (Gemini a little more), so a namespaced tool
is offered to them under its *flattened name*, and a call by that name resolves to the
namespaced tool (:class:`processor.core.registry.Registry` declares it, for each name and alias of
every namespaced entry). The mapping is pure, total and documented:

1. ``namespace + "__" + name`` when that is already provider-safe (``bookings__book_slot``);
2. otherwise every character outside ``[a-zA-Z0-9_-]`` becomes ``_``, the result is cut to 55
   characters, and ``_`` plus the first 8 hex digits of the SHA-256 of ``namespace``, a NUL and
   ``name`` (UTF-8) is appended: at most 64 characters, and two identities that differ only in
   the characters replaced or cut still get different names (up to the hash's collisions, which
   the registry refuses at load like any other).

A flattened name that meets another one, or a bare tool's name or alias, is refused when the
registry is loaded (and so at import): one name never resolves to two tools.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

__all__ = ["SAFE_NAME", "flat_name", "is_provider_safe"]

SAFE_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""The tool names every provider accepts (Anthropic's, OpenAI's, Bedrock's rule)."""

_UNSAFE: Final = re.compile(r"[^a-zA-Z0-9_-]")
_KEEP: Final = 55
_SEPARATOR: Final = "__"


def is_provider_safe(name: str) -> bool:
    """Whether every provider accepts ``name`` as a tool name as it is."""
    return SAFE_NAME.fullmatch(name) is not None


def flat_name(namespace: str, name: str) -> str:
    """The provider-safe bare name of ``name`` in ``namespace`` (see the module docstring)."""
    joined = f"{namespace}{_SEPARATOR}{name}"
    if is_provider_safe(joined):
        return joined
    digest = hashlib.sha256(f"{namespace}\0{name}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_UNSAFE.sub('_', joined)[:_KEEP]}_{digest[:8]}"
