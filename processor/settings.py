"""Runtime settings from the environment (prefix ``PROCESSOR_``) and flags, via pydantic-settings.

One :class:`Settings` object configures every Kafka-facing process (worker, publisher, tail,
executor, ``topics``). Values come from, in order of precedence: keyword arguments (the CLI passes
the flags it was given), environment variables ``PROCESSOR_<FIELD>`` (nested limits as
``PROCESSOR_LIMITS__<FIELD>``), then the defaults below. ``KAFKA_BOOTSTRAP_SERVERS`` is accepted
as an alias of ``PROCESSOR_BOOTSTRAP_SERVERS``.

Secrets (SASL password, OAUTHBEARER token, TLS key password) are :class:`~pydantic.SecretStr`;
:meth:`Settings.masked` renders the settings for logs with every secret masked.

Topic names derive from ``topic_prefix`` (default ``toolcalls.``), see :class:`TopicNames`.
:meth:`Settings.kafka_client_kwargs` gives the bootstrap and security keyword arguments shared by
every aiokafka client (producer, consumer, admin).

Invariants checked at load time: the transaction timeout is below the consumer session timeout
(ARCHITECTURE.md §5), the commit deadline is below the transaction timeout, and SASL settings are
complete for the chosen mechanism.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from processor.core.policy import Limits

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
CleanupPolicy = Literal["delete", "compact", "compact,delete"]

_DAY_MS = 24 * 3600 * 1000
_MASK = "**********"


class LimitsSettings(BaseModel):
    """Mirror of :class:`processor.core.policy.Limits` (a unit test guards that they match)."""

    max_call_bytes: int = Field(default=Limits.max_call_bytes, gt=0)
    max_deltas: int = Field(default=Limits.max_deltas, gt=0)
    max_reorder_window: int = Field(default=Limits.max_reorder_window, gt=0)
    # Arguments are re-encoded inside dispatch records; orjson writes at most 254 levels.
    max_depth: int = Field(default=Limits.max_depth, gt=0, le=200)
    idle_timeout_seconds: float = Field(default=Limits.idle_timeout_seconds, gt=0)
    max_open_buffers: int = Field(default=Limits.max_open_buffers, gt=0)
    max_open_buffers_per_tenant: int = Field(default=Limits.max_open_buffers_per_tenant, gt=0)
    retention_seconds: float = Field(default=Limits.retention_seconds, gt=0)
    binding_wait_seconds: float = Field(default=Limits.binding_wait_seconds, gt=0)
    max_clock_skew_seconds: float = Field(default=Limits.max_clock_skew_seconds, ge=0)
    response_wait_seconds: float = Field(default=Limits.response_wait_seconds, gt=0)
    max_seen_commands: int = Field(default=Limits.max_seen_commands, gt=0)
    max_turns: int = Field(default=Limits.max_turns, gt=0)
    max_turns_per_tenant: int = Field(default=Limits.max_turns_per_tenant, gt=0)
    max_inert_calls: int = Field(default=Limits.max_inert_calls, gt=0)
    max_responses: int = Field(default=Limits.max_responses, gt=0)
    max_denials_per_turn: int = Field(default=Limits.max_denials_per_turn, gt=0)

    def to_limits(self) -> Limits:
        return Limits(**self.model_dump())


@dataclass(frozen=True)
class TopicNames:
    """Every topic name of one deployment, derived from a prefix.

    The assembler workers read ``fragments`` and ``control`` and write the outputs and the
    ``changelog``; executors read ``dispatch`` and ``control`` and write ``status``, ``results``
    and their at-most-once ledger ``executions``.
    """

    fragments: str
    control: str
    dispatch: str
    proposals: str
    status: str
    ledger: str
    audit: str
    deadletter: str
    changelog: str
    results: str
    executions: str

    @classmethod
    def from_prefix(cls, prefix: str) -> TopicNames:
        return cls(
            fragments=f"{prefix}fragments",
            control=f"{prefix}control",
            dispatch=f"{prefix}dispatch",
            proposals=f"{prefix}proposals",
            status=f"{prefix}status",
            ledger=f"{prefix}ledger",
            audit=f"{prefix}audit",
            deadletter=f"{prefix}deadletter",
            changelog=f"{prefix}assembler-changelog",
            results=f"{prefix}results",
            executions=f"{prefix}executions",
        )

    def output(self, kind: str) -> str:
        """The topic of an output kind as named in ``processor.core.events.OUTPUT_TOPIC``."""
        name: str = getattr(self, kind)
        return name

    def all(self) -> dict[str, str]:
        """Role → topic name, in a stable order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


class Settings(BaseSettings):
    """Settings of the Kafka runtime (worker, publisher, tail, executor, topics)."""

    model_config = SettingsConfigDict(
        env_prefix="PROCESSOR_",
        env_nested_delimiter="__",
        extra="ignore",
        populate_by_name=True,
        validate_default=True,
    )

    # -- connection -------------------------------------------------------------------------
    bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices(
            "bootstrap_servers", "PROCESSOR_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS"
        ),
        min_length=1,
    )
    client_id: str = "toolcall-processor"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    sasl_oauth_token: SecretStr | None = None  # a static OAUTHBEARER token
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True
    request_timeout_ms: int = Field(default=30_000, gt=0)
    # how long a worker or executor waits for an unreachable broker (at start-up, or once lost)
    # before it exits 69 (processor.kafka.reachability)
    startup_timeout_seconds: float = Field(default=60.0, gt=0)

    # -- topics ----------------------------------------------------------------------------
    topic_prefix: str = "toolcalls."
    partitions: int = Field(default=6, gt=0)
    # None (the default): chosen from the cluster by `topics create` (processor.kafka.topics):
    # 3 when it has three or more brokers, else its broker count
    replication_factor: int | None = Field(default=None, gt=0)
    # None: 2 for topics of replication 3 or more, else the broker's default
    min_insync_replicas: int | None = Field(default=None, gt=0)
    input_retention_ms: int = 7 * _DAY_MS  # fragments and control
    output_retention_ms: int = 7 * _DAY_MS  # dispatch, proposals, status
    ledger_cleanup_policy: CleanupPolicy = "delete"
    ledger_retention_ms: int = 90 * _DAY_MS
    audit_cleanup_policy: CleanupPolicy = "delete"
    audit_retention_ms: int = -1  # forever
    deadletter_retention_ms: int = 14 * _DAY_MS
    # the executors' at-most-once ledger: compacted, and kept forever (-1) or at least as long as
    # dispatch records (output_retention_ms), so no dispatch record outlives the entry saying it ran
    executions_retention_ms: int = Field(default=-1, ge=-1)
    max_message_bytes: int = Field(default=8 * 1024 * 1024, gt=0)  # changelog/dispatch values

    # -- the assembler group -----------------------------------------------------------------
    group_id: str = "toolcall-assemblers"
    application_id: str = "toolcall-assembler"  # transactional ids are f"{application_id}-{p}"
    tools_file: Path | None = None
    # operator public keys: keyring files and/or folders of *.keyring.yaml files, merged; from the
    # environment one path or several separated by os.pathsep (":" on POSIX)
    keyring_file: Annotated[tuple[Path, ...] | None, NoDecode] = None
    # development only: without a keyring, apply operator commands WITHOUT signature checks
    # (``processor worker --allow-unsigned-commands``); unset, a worker with no keyring refuses
    # and audits every operator command as ``unsigned``
    allow_unsigned_commands: bool = False
    limits: LimitsSettings = Field(default_factory=LimitsSettings)

    batch_max_records: int = Field(default=500, gt=0)
    # The largest record batch the worker's transactional producers build per output partition
    # (capped at max_message_bytes). aiokafka's 16 KiB default cut one step's changelog into
    # several batches sent one after the other, each waiting for the one before it to leave.
    producer_batch_bytes: int = Field(default=1024 * 1024, gt=0)
    poll_timeout_ms: int = Field(default=200, ge=0)
    # once a poll hands records over, the worker waits up to this long for the fetch the
    # consumer starts then, and processes both together (processor.runtime.worker._top_up)
    fetch_topup_ms: int = Field(default=5, ge=0)
    tick_interval_seconds: float = Field(default=1.0, gt=0)
    # A dead member is noticed after the session timeout: its partitions stand still until
    # then, so it is short (dispatch resumes within ~15 s of a SIGKILL). Transactions must be
    # shorter still (ARCHITECTURE.md §5), and the commit deadline shorter than a transaction.
    session_timeout_ms: int = Field(default=10_000, gt=0)
    heartbeat_interval_ms: int = Field(default=1_000, gt=0)
    max_poll_interval_ms: int = Field(default=300_000, gt=0)
    transaction_timeout_ms: int = Field(default=9_000, gt=0)
    commit_timeout_seconds: float = Field(default=7.0, gt=0)
    restore_timeout_seconds: float = Field(default=300.0, gt=0)
    # an executor whose loop makes no progress this long (no record decided, no poll returned,
    # a handler's own run time not counted) logs one line and exits 1, for its supervisor to
    # restart it (processor.executor.client); its liveness probe fails from then on
    executor_stall_timeout_seconds: float = Field(default=120.0, gt=0)
    # handlers one executor runs at once, across its partitions and within one
    # (processor.executor.inflight): the bound is its back-pressure (the consumer pauses)
    executor_max_in_flight: int = Field(default=64, gt=0)
    # claimed calls that may wait for a free slot (None: half of executor_max_in_flight, at
    # least 1): a slot that frees is taken at once, not after a fetch and a claim transaction;
    # an executor killed meanwhile reports them ``unknown`` (they never run), at most this many
    executor_claim_ahead: int | None = Field(default=None, ge=0)
    # finished calls' outcomes are written together, one transaction per partition at most
    # this often (milliseconds): the window in which a finished call can still end ``unknown``
    executor_flush_interval_ms: float = Field(default=5.0, ge=0)
    # a released partition (revoke, stop) waits this long for its running handlers; the rest
    # are cancelled and reported ``unknown`` (never run again)
    executor_release_wait_seconds: float = Field(default=10.0, gt=0)
    # a running call whose turn is stopped (turn.cancelled, quarantine, tool disable, tenant
    # stop) is told so at once (Call.stop), and cancelled this long after if it still runs
    executor_stop_grace_seconds: float = Field(default=5.0, ge=0)
    # local state stores (processor.runtime.store): one RocksDB per partition under this folder,
    # so a restart restores only the changelog tail after each store's checkpoint; unset, every
    # assignment restores from the changelog in full. Its block cache, per partition, in MiB.
    state_dir: Path | None = None
    state_cache_mb: int = Field(default=16, gt=0)
    lag_interval_seconds: float = Field(default=5.0, gt=0)
    # the worker freezes what survived its young collections this often, so full collections
    # skip its long-lived state (processor.runtime.collector); 0: CPython's default collector
    gc_freeze_interval_seconds: float = Field(default=1.0, ge=0)

    # -- observability ---------------------------------------------------------------------
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # all interfaces by default: liveness/readiness probes reach the pod address
    metrics_host: str = "0.0.0.0"  # noqa: S104
    log_level: str = "INFO"

    @field_validator("keyring_file", mode="before")
    @classmethod
    def _path_list(cls, value: Any) -> Any:
        """One path, a list of paths, or paths joined by ``os.pathsep``; empty means none."""
        if value is None:
            return None
        items = value if isinstance(value, list | tuple) else [value]
        paths: list[Any] = []
        for item in items:
            if isinstance(item, str):
                paths.extend(part for part in item.split(os.pathsep) if part.strip())
            else:
                paths.append(item)
        return tuple(paths) or None

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.transaction_timeout_ms >= self.session_timeout_ms:
            raise ValueError(
                f"transaction_timeout_ms ({self.transaction_timeout_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.commit_timeout_seconds * 1000 >= self.transaction_timeout_ms:
            raise ValueError(
                f"commit_timeout_seconds ({self.commit_timeout_seconds}) must be below "
                f"transaction_timeout_ms ({self.transaction_timeout_ms} ms)"
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be below session_timeout_ms")
        uses_sasl = self.security_protocol.startswith("SASL_")
        if uses_sasl and self.sasl_mechanism is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs sasl_mechanism")
        if uses_sasl and self.sasl_mechanism == "OAUTHBEARER":
            if self.sasl_oauth_token is None:
                raise ValueError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token")
        elif uses_sasl and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs username and password")
        if 0 <= self.executions_retention_ms < self.output_retention_ms:
            raise ValueError(
                f"executions_retention_ms ({self.executions_retention_ms}) must be -1 (forever) or "
                f"at least output_retention_ms ({self.output_retention_ms}): a dispatch record "
                "must not outlive the ledger entry that says it ran"
            )
        if not self.topic_prefix.strip() == self.topic_prefix:
            raise ValueError("topic_prefix must not start or end with whitespace")
        return self

    # -- derived -----------------------------------------------------------------------------

    @property
    def topics(self) -> TopicNames:
        return TopicNames.from_prefix(self.topic_prefix)

    def core_limits(self) -> Limits:
        return self.limits.to_limits()

    def transactional_id(self, partition: int) -> str:
        """The stable transactional id of input partition ``partition`` (fencing by id, §5)."""
        return f"{self.application_id}-{partition}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context from the CA/cert/key files, or None when TLS is not used."""
        if self.security_protocol not in ("SSL", "SASL_SSL"):
            return None
        from aiokafka.helpers import create_ssl_context  # noqa: PLC0415

        context: ssl.SSLContext = create_ssl_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None,
            certfile=str(self.ssl_certfile) if self.ssl_certfile else None,
            keyfile=str(self.ssl_keyfile) if self.ssl_keyfile else None,
            password=self.ssl_key_password.get_secret_value() if self.ssl_key_password else None,
        )
        context.check_hostname = self.ssl_check_hostname
        return context

    def kafka_client_kwargs(self) -> dict[str, Any]:
        """Bootstrap + security keyword arguments for any aiokafka client (producer/consumer/admin).

        Only settings that differ from aiokafka's defaults are included, so the result is valid for
        ``AIOKafkaProducer``, ``AIOKafkaConsumer`` and ``AIOKafkaAdminClient`` alike.
        """
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
            "security_protocol": self.security_protocol,
        }
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.security_protocol.startswith("SASL_"):
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                assert self.sasl_oauth_token is not None
                kwargs["sasl_oauth_token_provider"] = _static_token_provider(self.sasl_oauth_token)
            else:
                assert self.sasl_password is not None
                kwargs["sasl_plain_username"] = self.sasl_username
                kwargs["sasl_plain_password"] = self.sasl_password.get_secret_value()
        return kwargs

    def masked_dict(self) -> dict[str, Any]:
        """The settings as plain JSON-able data, every secret replaced by a mask."""
        data = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if field.annotation is not None and "SecretStr" in str(field.annotation):
                data[name] = _MASK if getattr(self, name) is not None else None
        return data

    def masked(self) -> str:
        """One ``name=value`` line per setting, secrets masked: safe to print and log."""
        lines: list[str] = []
        for name, value in self.masked_dict().items():
            if isinstance(value, dict):
                lines.extend(f"{name}.{k}={v}" for k, v in value.items())
            else:
                lines.append(f"{name}={value}")
        return "\n".join(lines)


def _static_token_provider(token: SecretStr) -> Any:
    """An aiokafka OAUTHBEARER token provider that always returns the configured token."""
    from aiokafka.abc import AbstractTokenProvider  # noqa: PLC0415

    class _StaticToken(AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return token.get_secret_value()

    return _StaticToken()
