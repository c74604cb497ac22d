"""One error tree (issue 41, item 2): every exception class the package defines is a
``ProcessorError``, drawn in :mod:`processor.core.errors`, and its exit code comes from the tree.

``processor.exits.CliError`` (the commands' own failures, which carry their exit code) is the
one class outside it: the exit-code taxonomy must import nothing of the package.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import processor
from processor.core import errors
from processor.exits import CliError, ConfigInvalid, ExitCode, classify


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(processor.__path__, "processor."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def _defined_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra that is not installed here
            continue
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return list(found.values())


def test_every_exception_the_package_defines_is_in_the_tree() -> None:
    outside = [
        f"{c.__module__}.{c.__qualname__}"
        for c in _defined_exceptions()
        if not issubclass(c, errors.ProcessorError)
        and not issubclass(c, CliError)
        and not issubclass(c, Warning)
    ]
    # the one exception: processor.kafka.clients.ProducerDiscarded is an aiokafka KafkaError
    # on purpose (aiokafka's own retry paths must see it as theirs)
    assert outside == ["processor.kafka.clients.ProducerDiscarded"]


def test_the_tree_is_drawn_with_every_public_member_of_it() -> None:
    from processor.executor import handlers

    drawing = (errors.__doc__ or "") + (handlers.__doc__ or "")
    public = [c for c in _defined_exceptions() if issubclass(c, errors.ProcessorError)]
    missing = [
        c.__qualname__
        for c in public
        if not c.__qualname__.startswith("_") and c.__qualname__ not in drawing
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.ConfigurationError(detail="x"), ExitCode.CONFIG),
        (errors.RegistryError(detail="x"), ExitCode.CONFIG),
        (errors.KafkaStepError("x"), None),
        (errors.StateStoreError("x"), None),
        (errors.McpError("x"), None),
        (errors.ExecutionError("x"), None),
    ],
)
def test_the_exit_code_is_the_trees(error: errors.ProcessorError, code: ExitCode | None) -> None:
    found = classify(error)
    assert (found.code if found is not None else None) == code
    assert error.exit_code == code


def test_a_member_raised_with_its_message_reads_as_it_and_keeps_its_reason() -> None:
    from processor.kafka.topics import TopicLayoutError
    from processor.runtime.store import StoreCorrupt

    corrupt = StoreCorrupt("unreadable checkpoint")
    assert str(corrupt) == "unreadable checkpoint" and corrupt.reason == "state_store"
    layout = TopicLayoutError("create the topics first")
    assert isinstance(layout, errors.ConfigurationError) and layout.reason == "topic_layout"
    assert isinstance(classify(layout), ConfigInvalid)
