"""What an executor embeds: the :class:`Call` a handler receives and the :class:`Handlers` set.

A handler is an async function ``handler(call) -> dict | None`` registered for one tool name
(optionally one tool version), in one namespace or none: a tool's identity is its
``(namespace, name)``, so a handler registered for the bare ``transfer`` never runs a dispatch
of ``crm``'s ``transfer`` (``register(..., namespace="crm")`` is that one's). It receives
only calls that a worker validated and dispatched and that the execution-time fence let
through, with:

- ``call.dispatch_id`` — the idempotency key to pass to the external system
  (``call.idempotency_key`` is the same value): the executor runs a dispatch at most once per
  executor group, and an external system that dedupes on this key also survives the rare
  ``unknown`` outcome being resolved by hand;
- ``call.key`` (tenant, turn, response, item, call id), ``call.actor`` (the turn's authenticated
  actor), ``call.traceparent`` / ``call.tracestate`` (W3C Trace Context from the dispatch
  record's headers);
- ``call.arguments`` — the validated arguments. They are hidden from ``repr`` so that logging a
  call never writes argument values.

While a handler runs, ``call.stop`` (:class:`StopSignal`) is set when its turn is stopped: a
``turn.cancelled``, a quarantine of its response, a disable of its tool or a stop of its tenant
committed to ``control`` after the call started. A handler that can still stop cleanly awaits
or polls it (``await call.stop.wait()``, ``call.stop.is_set()``) and raises
``ExecutionFailed("cancelled_while_running")`` when it did nothing; one that goes on is
cancelled after the executor's grace period (``PROCESSOR_EXECUTOR_STOP_GRACE_SECONDS``), and
its outcome is ``unknown`` (reason ``cancelled_while_running``: it may have acted).

The executor's branch of the error tree (:mod:`processor.core.errors`)::

    ExecutionError
    ├── ExecutionFailed     a handler's clean, reportable failure (``failed``, with its code)
    ├── OutcomeUnknown      a handler that cannot tell whether it acted (``unknown``)
    ├── ExecutorStalled     the loop made no progress for its stall timeout (the process exits)
    └── Stopping            the executor is stopping: the record in hand is left unacknowledged

A handler returns a small JSON object for the result record (or ``None``), or raises
:class:`ExecutionFailed` with a code for a clean failure, or :class:`OutcomeUnknown` when it
cannot tell whether the external side effect happened (a connection lost mid-call: the outcome
is ``unknown``, as after a crash). Any other exception is recorded as failed with the
exception's class name only (its message may contain argument values).

``processor executor run --handlers module:object`` loads ``object`` with
:func:`load_handlers`: a :class:`Handlers`, a mapping ``{tool: handler}``, or a zero-argument
callable returning either.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from processor.core.errors import ConfigurationError, ExecutionError
from processor.core.events import CallKey, Dispatch

__all__ = [
    "Call",
    "ExecutionFailed",
    "Handler",
    "Handlers",
    "OutcomeUnknown",
    "Registration",
    "StopSignal",
    "load_handlers",
]

_CODE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")


class StopSignal:
    """Set by the executor when the call's turn is stopped while its handler runs; ``reason``
    is the fence's code (``turn_cancelled``, ``quarantined``, ``tool_disabled``,
    ``tenant_stopped``)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> str:
        """Return once the call is told to stop: the reason."""
        await self._event.wait()
        return self.reason or "stopped"

    def set(self, reason: str) -> None:
        """Tell the handler to stop (the executor's; the first reason is kept)."""
        if self.reason is None:
            self.reason = reason
        self._event.set()


@dataclass(frozen=True)
class Call:
    """One validated, fenced call, as a handler sees it."""

    dispatch_id: str
    key: CallKey
    tool: str
    tool_version: str
    actor: str
    args_digest: str
    confirmation_ref: str | None
    traceparent: str | None
    tracestate: str | None
    arguments: Mapping[str, Any] = field(repr=False)
    namespace: str | None = None
    stop: StopSignal = field(default_factory=StopSignal, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        """The key an external system should dedupe the side effect on (the dispatch id)."""
        return self.dispatch_id

    @classmethod
    def from_dispatch(cls, dispatch: Dispatch, headers: Mapping[str, bytes] | None = None) -> Call:
        headers = headers or {}
        return cls(
            dispatch_id=dispatch.dispatch_id,
            key=dispatch.key,
            tool=dispatch.tool,
            tool_version=dispatch.tool_version,
            actor=dispatch.actor,
            args_digest=dispatch.args_digest,
            confirmation_ref=dispatch.confirmation_ref,
            traceparent=_header(headers, "traceparent"),
            tracestate=_header(headers, "tracestate"),
            arguments=dispatch.arguments,
            namespace=dispatch.namespace,
        )


def _header(headers: Mapping[str, bytes], name: str) -> str | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        return raw.decode("ascii")[:512]
    except UnicodeDecodeError:
        return None


class ExecutionFailed(ExecutionError):
    """Raised by a handler for a clean, reportable failure.

    ``code`` is a snake_case code (it goes to the result and to metrics); ``retry_possible``
    tells the user whether asking again may work; ``detail`` is a short human note that must
    not contain argument values.
    """

    reason = "execution_failed"

    def __init__(self, code: str, *, retry_possible: bool = False, detail: str = "") -> None:
        if not _CODE.fullmatch(code):
            code = "handler_error"
        super().__init__(code)
        self.code = code
        self.retry_possible = retry_possible
        self.detail = detail[:512]


class OutcomeUnknown(ExecutionError):
    """Raised by a handler that cannot tell whether the side effect happened (the request may
    have reached the external system; its answer was lost). The outcome is ``unknown`` with
    ``code`` as its reason, and the call is never run again."""

    reason = "outcome_unknown"

    def __init__(self, code: str, *, detail: str = "") -> None:
        if not _CODE.fullmatch(code):
            code = "outcome_unknown"
        super().__init__(code)
        self.code = code
        self.detail = detail[:512]


Handler = Callable[[Call], Awaitable[Mapping[str, Any] | None]]


@dataclass(frozen=True)
class Registration:
    """A handler for ``tool`` in ``namespace`` (None: the bare tool), any version when
    ``version`` is None.

    ``requires_confirmation``: the fence refuses a dispatch of this tool that names no
    confirmation (``None``: take it from the tool registry; an executor without a registry
    that declares the tool refuses to start, since it cannot know).
    ``confirmation_max_age_seconds``: how old the confirmation may be when the call runs
    (``None``: the tool's ``confirmation_ttl_seconds`` from the registry, else no limit).
    ``timeout_seconds``: a handler running longer is cancelled and the outcome is ``unknown``.
    ``in_order``: the calls of one turn of the tools registered so run one at a time, in
    dispatch order (a call waits until the one before it has ended). Calls otherwise overlap:
    those of different turns always, and those of one turn too (the calls of one response are
    independent by every provider's definition of parallel tool calls). While such a call
    waits, so does the rest of its dispatch partition (offsets are committed in order).
    """

    tool: str
    handler: Handler
    version: str | None = None
    requires_confirmation: bool | None = None
    confirmation_max_age_seconds: float | None = None
    timeout_seconds: float = 60.0
    namespace: str | None = None
    in_order: bool = False


class Handlers:
    """The handlers of one executor, by tool identity (namespace, name) and version."""

    def __init__(self) -> None:
        self._by_tool: dict[tuple[str | None, str], dict[str | None, Registration]] = {}

    def register(
        self,
        tool: str,
        handler: Handler,
        *,
        version: str | None = None,
        requires_confirmation: bool | None = None,
        confirmation_max_age_seconds: float | None = None,
        timeout_seconds: float = 60.0,
        namespace: str | None = None,
        in_order: bool = False,
    ) -> Registration:
        versions = self._by_tool.setdefault((namespace, tool), {})
        if version in versions:
            shown = "any version" if version is None else f"version {version!r}"
            where = f" in namespace {namespace!r}" if namespace is not None else ""
            raise ConfigurationError(
                "duplicate_handler", f"tool {tool!r}{where} ({shown}) has a handler already"
            )
        registration = Registration(
            tool=tool,
            handler=handler,
            version=version,
            requires_confirmation=requires_confirmation,
            confirmation_max_age_seconds=confirmation_max_age_seconds,
            timeout_seconds=timeout_seconds,
            namespace=namespace,
            in_order=in_order,
        )
        versions[version] = registration
        return registration

    def tool(
        self,
        name: str,
        *,
        version: str | None = None,
        requires_confirmation: bool | None = None,
        confirmation_max_age_seconds: float | None = None,
        timeout_seconds: float = 60.0,
        namespace: str | None = None,
        in_order: bool = False,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of :meth:`register`."""

        def decorate(handler: Handler) -> Handler:
            self.register(
                name,
                handler,
                version=version,
                requires_confirmation=requires_confirmation,
                confirmation_max_age_seconds=confirmation_max_age_seconds,
                timeout_seconds=timeout_seconds,
                namespace=namespace,
                in_order=in_order,
            )
            return handler

        return decorate

    def handles(self, tool: str, namespace: str | None = None) -> bool:
        """Whether this executor handles ``tool`` in ``namespace`` (None: the bare tool) at all
        (other tools belong to other groups). Exact match on both."""
        return (namespace, tool) in self._by_tool

    def lookup(self, tool: str, version: str, namespace: str | None = None) -> Registration | None:
        """The registration of ``tool`` in ``namespace`` for exactly ``version``, else the
        any-version one, else None."""
        versions = self._by_tool.get((namespace, tool), {})
        return versions.get(version) or versions.get(None)

    def tools(self) -> list[str]:
        """The tool names handled (in any namespace)."""
        return sorted({name for _namespace, name in self._by_tool})

    def identities(self) -> list[tuple[str | None, str]]:
        """The (namespace, name) of every tool handled."""
        return sorted(self._by_tool, key=lambda k: (k[0] is not None, k[0] or "", k[1]))

    def __iter__(self) -> Iterator[Registration]:
        for versions in self._by_tool.values():
            yield from versions.values()

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_tool.values())


def load_handlers(spec: str) -> Handlers:
    """Import ``module:object`` and return its :class:`Handlers`.

    ``object`` may be a :class:`Handlers`, a mapping ``{tool: handler}``, or a zero-argument
    callable returning either. Raises :class:`ConfigurationError` naming what is wrong.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError("invalid_handlers", f"{spec!r}: expected module:object")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            "invalid_handlers", f"{spec!r}: cannot import {module_name!r}: {exc}"
        ) from None
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(
                "invalid_handlers", f"{spec!r}: {module_name!r} has no attribute {attribute!r}"
            ) from None
    if not isinstance(obj, Handlers | Mapping) and callable(obj):
        obj = obj()
    if isinstance(obj, Handlers):
        handlers = obj
    elif isinstance(obj, Mapping):
        handlers = Handlers()
        for tool, handler in obj.items():
            if not isinstance(tool, str) or not callable(handler):
                raise ConfigurationError(
                    "invalid_handlers", f"{spec!r}: mapping must be {{tool name: async handler}}"
                )
            handlers.register(tool, handler)
    else:
        raise ConfigurationError(
            "invalid_handlers",
            f"{spec!r}: expected Handlers, a {{tool: handler}} mapping, or a factory of either",
        )
    if not len(handlers):
        raise ConfigurationError("invalid_handlers", f"{spec!r}: no handlers registered")
    return handlers
