"""Reading a tool registry file (YAML, JSON accepted) and resolving business validators.

This is the IO edge of :mod:`processor.core.registry`: it reads the file, parses it, and resolves
each validator's dotted path (``package.module:function`` or ``package.module.function``) to a
callable. Errors name the file, the tool and the reason.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, cast

import yaml

from processor.core.errors import RegistryError
from processor.core.registry import BusinessValidator, Registry


def resolve_validator(path: str) -> BusinessValidator:
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise RegistryError(detail=f"{path!r} is not a dotted path to a callable")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise RegistryError(detail=f"cannot import {path!r}: {exc}") from None
    if not callable(target):
        raise RegistryError(detail=f"{path!r} is not callable")
    return cast(BusinessValidator, target)


def load_registry(path: str | Path) -> Registry:
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError(detail=f"{source}: cannot read: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)  # YAML is a superset of JSON: both load here
    except yaml.YAMLError as exc:
        raise RegistryError(detail=f"{source}: not valid YAML/JSON: {exc}") from None
    except RecursionError:
        raise RegistryError(
            detail=f"{source}: nested deeper than can be read within Python's recursion limit"
        ) from None
    return Registry.from_document(doc, source=source, resolve_validator=resolve_validator)
