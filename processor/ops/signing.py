"""Ed25519 signing and verification of operator commands (ARCHITECTURE.md §6).

This module owns:

- the canonical bytes an operator command is signed over (:func:`canonical_bytes`);
- key generation (:func:`generate_keypair`, and :func:`keygen` for the CLI, which writes a private
  key file and a keyring entry file);
- signing on the operator side (:class:`OperatorSigner`);
- verification on the worker side (:class:`Keyring`, which satisfies
  :class:`processor.core.authn.CommandVerifier`). Workers hold only public keys and each key's
  operator name, tenant scope and maximum command lifetime.

What a signature covers: the canonical JSON of the command without its ``signature`` field, i.e.
``command.model_dump(mode="json", exclude={"signature"})`` serialised by orjson with sorted keys
and no whitespace. That is *every other field*: ``type``, ``v``, the target (``tenant``,
``turn_id``, ``response_id``, ``tool``, whichever the command type has, including a null
``tenant`` for a global tool command), ``issued_at``, ``expires_at``, ``key_id``, ``issued_by``,
``command_id`` and ``reason``. Changing any of them, or turning one command type into another,
breaks the signature.

:meth:`Keyring.verify` is pure (``now`` is passed in; no clock, no IO). Its checks, in order:

1. ``unsigned``        no ``signature`` or no ``key_id``;
2. ``unknown_key``     ``key_id`` is not in the keyring;
3. ``bad_signature``   the signature is not canonical base64 of 64 bytes, or does not verify;
4. ``issuer_mismatch`` validly signed, but ``issued_by`` is not the key's operator;
5. ``no_expiry``       ``expires_at`` missing (or not finite);
6. ``expired``         ``now > expires_at``;
7. ``not_yet_valid``   ``issued_at > now + CLOCK_SKEW_SECONDS`` (or ``issued_at`` not finite);
8. ``ttl_too_long``    ``expires_at - issued_at`` exceeds the key's ``max_ttl_seconds``;
9. ``out_of_scope``    the target tenant is not in the key's ``tenants``; a global command
   (``tenant`` null: a ``tool.disabled``/``tool.enabled`` for every tenant) needs ``"*"``.

The signature is checked before any field is interpreted, so a tampered field always reads as
``bad_signature`` and nothing unauthenticated decides the outcome.

Replay protection (rejecting a ``command_id`` seen before) is NOT done here: the Assembler keeps
seen command ids in its per-partition state, which survives restarts through the changelog. The
bounded lifetime (``expires_at``, ``max_ttl_seconds``) bounds how long that state must remember.

Keyring document (YAML or JSON); :meth:`Keyring.load` merges several files, and folders of
``*.keyring.yaml`` files (``keygen`` writes one per key), refusing a key id defined twice::

    keys:
      - key_id: ops-alice-2025
        operator: alice            # must equal the command's issued_by
        public_key: <base64 of the 32 raw Ed25519 public key bytes>
        tenants: ["acme", "globex"] # or ["*"] for every tenant and global commands
        max_ttl_seconds: 900        # optional, default 3600
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import orjson
import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from processor.core import authn
from processor.core.authn import CommandVerifier
from processor.core.errors import ConfigurationError
from processor.core.events import OperatorCommand

__all__ = [
    "CLOCK_SKEW_SECONDS",
    "DEFAULT_MAX_TTL_SECONDS",
    "KEYRING_SUFFIX",
    "WILDCARD",
    "CommandVerifier",
    "Keyring",
    "KeyringEntry",
    "OperatorSigner",
    "canonical_bytes",
    "generate_keypair",
    "keygen",
]

CLOCK_SKEW_SECONDS: Final = 60.0
"""How far in the future of the verifier's ``now`` a command's ``issued_at`` may lie."""
DEFAULT_MAX_TTL_SECONDS: Final = 3600.0
"""A key's maximum ``expires_at - issued_at`` when its entry names no ``max_ttl_seconds``."""
WILDCARD: Final = "*"
"""The tenant scope that covers every tenant and global (tenant-less) commands."""
KEYRING_SUFFIX: Final = ".keyring.yaml"
"""The name ending of keyring files: what ``keygen`` writes and what a keyring folder holds."""

_PUBLIC_KEY_BYTES: Final = 32
_SIGNATURE_BYTES: Final = 64
_ENTRY_FIELDS: Final = frozenset({"key_id", "operator", "public_key", "tenants", "max_ttl_seconds"})
_MAX_ID_CHARS: Final = 256
_SAFE_KEY_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

_C = TypeVar("_C", bound=OperatorCommand)


# --------------------------------------------------------------------------- canonical form


def canonical_bytes(command: OperatorCommand) -> bytes:
    """The bytes an operator command's signature covers.

    The command's JSON-mode dump without ``signature`` (so including ``type``, ``v``, the target
    tenant/turn/response/tool, ``issued_at``, ``expires_at``, ``key_id``, ``issued_by``,
    ``command_id`` and ``reason``, with null fields kept), serialised by orjson with sorted keys
    and no whitespace.
    """
    payload = command.model_dump(mode="json", exclude={"signature"})
    return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _b64decode_canonical(text: str) -> bytes | None:
    """Strict standard base64; ``None`` unless ``text`` is the one canonical encoding."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw if _b64(raw) == text else None


# --------------------------------------------------------------------------- keys and signing


def generate_keypair() -> tuple[bytes, str]:
    """A new Ed25519 key pair: (private key PEM, PKCS8 unencrypted; base64 of the raw 32 bytes)."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    return pem, _public_b64(private.public_key())


def _public_b64(public: Ed25519PublicKey) -> str:
    return _b64(
        public.public_bytes(
            encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
        )
    )


class OperatorSigner:
    """Signs operator commands with one operator's Ed25519 private key (the CLI side)."""

    def __init__(self, private_key_pem: bytes, key_id: str, issued_by: str) -> None:
        try:
            key = serialization.load_pem_private_key(private_key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                "invalid_signing_key", f"key {key_id!r}: cannot load private key: {exc}"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError(
                "invalid_signing_key", f"key {key_id!r}: not an Ed25519 private key"
            )
        if not key_id or not issued_by:
            raise ConfigurationError("invalid_signing_key", "key_id and issued_by must be set")
        self._key = key
        self.key_id = key_id
        self.issued_by = issued_by

    @property
    def public_key_b64(self) -> str:
        """Base64 of the 32 raw public key bytes (what a keyring entry holds)."""
        return _public_b64(self._key.public_key())

    def sign(self, command: _C) -> _C:
        """A copy of ``command`` with ``key_id``/``issued_by`` set to this signer's and signed.

        The caller sets ``issued_at`` and ``expires_at``; a command without ``expires_at`` is
        signed but every :class:`Keyring` rejects it (``no_expiry``).
        """
        unsigned = command.model_copy(
            update={"key_id": self.key_id, "issued_by": self.issued_by, "signature": None}
        )
        signature = self._key.sign(canonical_bytes(unsigned))
        # model_copy keeps the concrete class; mypy widens a union-bound TypeVar, hence the cast.
        return cast(_C, unsigned.model_copy(update={"signature": _b64(signature)}))


# --------------------------------------------------------------------------- keyring


@dataclass(frozen=True, slots=True)
class KeyringEntry:
    """One operator public key with its operator name, tenant scope and maximum command TTL."""

    key_id: str
    operator: str
    public_key: Ed25519PublicKey
    tenants: frozenset[str]
    max_ttl_seconds: float = DEFAULT_MAX_TTL_SECONDS

    def covers(self, tenant: str | None) -> bool:
        """Whether this key may command ``tenant`` (``None``: a global command, needs ``*``)."""
        return WILDCARD in self.tenants or (tenant is not None and tenant in self.tenants)


def _entry_error(source: str, key_id: str, reason: str) -> ConfigurationError:
    return ConfigurationError("invalid_keyring", f"{source}: key {key_id}: {reason}")


def _parse_entry(raw: object, index: int, source: str) -> KeyringEntry:
    if not isinstance(raw, Mapping):
        raise _entry_error(source, f"#{index}", "entry is not a mapping")
    raw_id = raw.get("key_id")
    if not isinstance(raw_id, str) or not raw_id or len(raw_id) > _MAX_ID_CHARS:
        raise _entry_error(source, f"#{index}", "key_id must be a non-empty string (<= 256)")
    name = repr(raw_id)
    unknown = sorted(str(k) for k in raw if k not in _ENTRY_FIELDS)
    if unknown:
        raise _entry_error(source, name, f"unknown field(s) {', '.join(unknown)}")
    operator = raw.get("operator")
    if not isinstance(operator, str) or not operator or len(operator) > _MAX_ID_CHARS:
        raise _entry_error(source, name, "operator must be a non-empty string (<= 256)")
    public_b64 = raw.get("public_key")
    if not isinstance(public_b64, str):
        raise _entry_error(source, name, "public_key must be a base64 string")
    public_raw = _b64decode_canonical(public_b64)
    if public_raw is None:
        raise _entry_error(source, name, "public_key is not valid base64")
    if len(public_raw) != _PUBLIC_KEY_BYTES:
        raise _entry_error(
            source, name, f"public_key must be 32 raw Ed25519 bytes, got {len(public_raw)}"
        )
    try:
        public = Ed25519PublicKey.from_public_bytes(public_raw)
    except ValueError as exc:
        raise _entry_error(source, name, f"public_key is not an Ed25519 key: {exc}") from None
    tenants = raw.get("tenants")
    if (
        not isinstance(tenants, list)
        or not tenants
        or not all(isinstance(t, str) and t for t in tenants)
    ):
        raise _entry_error(
            source, name, 'tenants must be a non-empty list of tenant names or ["*"]'
        )
    max_ttl: Any = raw.get("max_ttl_seconds")
    if max_ttl is None:
        max_ttl = DEFAULT_MAX_TTL_SECONDS
    if (
        isinstance(max_ttl, bool)
        or not isinstance(max_ttl, int | float)
        or not math.isfinite(max_ttl)
        or max_ttl <= 0
    ):
        raise _entry_error(source, name, "max_ttl_seconds must be a positive finite number")
    return KeyringEntry(
        key_id=raw_id,
        operator=operator,
        public_key=public,
        tenants=frozenset(tenants),
        max_ttl_seconds=float(max_ttl),
    )


class Keyring:
    """The public keys a worker trusts; verifies operator commands (a :class:`CommandVerifier`).

    Pure: :meth:`verify` takes ``now`` and does no IO. Only :meth:`load` reads files.
    """

    def __init__(self, entries: Iterable[KeyringEntry], source: str = "<keyring>") -> None:
        keys: dict[str, KeyringEntry] = {}
        for entry in entries:
            if entry.key_id in keys:
                raise _entry_error(source, repr(entry.key_id), "duplicate key_id")
            keys[entry.key_id] = entry
        self._keys = keys
        self.source = source

    @classmethod
    def from_document(cls, doc: object, source: str = "<document>") -> Keyring:
        """Build a keyring from a parsed ``{"keys": [...]}`` document; ``source`` names it in
        errors (:class:`ConfigurationError` naming the source, the key id and the reason)."""
        if not isinstance(doc, Mapping):
            raise ConfigurationError("invalid_keyring", f"{source}: document is not a mapping")
        unknown = sorted(str(k) for k in doc if k != "keys")
        if unknown:
            raise ConfigurationError(
                "invalid_keyring", f"{source}: unknown top-level field(s) {', '.join(unknown)}"
            )
        raw_keys = doc.get("keys")
        if not isinstance(raw_keys, list):
            raise ConfigurationError("invalid_keyring", f"{source}: 'keys' must be a list")
        return cls((_parse_entry(raw, i, source) for i, raw in enumerate(raw_keys)), source=source)

    @classmethod
    def load(cls, *paths: str | os.PathLike[str]) -> Keyring:
        """Read and merge keyring files: each path is a keyring file (JSON when it ends in
        ``.json``, YAML (PyYAML safe_load) else) or a folder, which contributes every
        ``*.keyring.yaml`` file in it (what ``processor ctl keygen`` writes, one per key).

        A key id found in two files is an error naming both; a folder without keyring files, or
        files that hold no key at all (``keys: []``), is an error too (exit 78 from the CLI).
        """
        files = _keyring_files(paths)
        entries: list[KeyringEntry] = []
        origin: dict[str, Path] = {}
        for file in files:
            ring = cls._read(file)
            for key_id, entry in ring._keys.items():
                if key_id in origin:
                    raise ConfigurationError(
                        "invalid_keyring",
                        f"key {key_id!r}: duplicate key_id in {origin[key_id]} and {file}",
                    )
                origin[key_id] = file
                entries.append(entry)
        source = ", ".join(str(f) for f in files)
        if not entries:  # e.g. the last key removed because it leaked: never "no checks"
            raise ConfigurationError(
                "invalid_keyring",
                f"{source}: the keyring holds no key: a worker would refuse every operator "
                "command; add a key (`processor ctl keygen`) or remove the keyring setting",
            )
        return cls(entries, source=source)

    @classmethod
    def _read(cls, p: Path) -> Keyring:
        """One keyring file."""
        try:
            text = p.read_bytes()
        except OSError as exc:
            raise ConfigurationError(
                "invalid_keyring", f"{p}: cannot read keyring: {exc.strerror or exc}"
            ) from None
        try:
            doc = orjson.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
        except orjson.JSONDecodeError as exc:
            raise ConfigurationError("invalid_keyring", f"{p}: not JSON: {exc.msg}") from None
        except yaml.YAMLError as exc:
            raise ConfigurationError("invalid_keyring", f"{p}: not YAML: {exc}") from None
        return cls.from_document(doc, source=str(p))

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def get(self, key_id: str) -> KeyringEntry | None:
        return self._keys.get(key_id)

    def verify(self, command: OperatorCommand, now: float) -> str | None:
        """``None`` when ``command`` may be applied at ``now``, else a stable rejection code.

        See the module docstring for the order of checks. Replay (a repeated ``command_id``) is
        the Assembler's check, not this one.
        """
        if not command.signature or not command.key_id:
            return authn.UNSIGNED
        entry = self._keys.get(command.key_id)
        if entry is None:
            return authn.UNKNOWN_KEY
        signature = _b64decode_canonical(command.signature)
        if signature is None or len(signature) != _SIGNATURE_BYTES:
            return authn.BAD_SIGNATURE
        try:
            entry.public_key.verify(signature, canonical_bytes(command))
        except InvalidSignature:
            return authn.BAD_SIGNATURE
        if command.issued_by != entry.operator:
            return authn.ISSUER_MISMATCH
        expires_at = command.expires_at
        if expires_at is None or not math.isfinite(expires_at):
            return authn.NO_EXPIRY
        if now > expires_at:
            return authn.EXPIRED
        issued_at = command.issued_at
        if not math.isfinite(issued_at) or issued_at > now + CLOCK_SKEW_SECONDS:
            return authn.NOT_YET_VALID
        if expires_at - issued_at > entry.max_ttl_seconds:
            return authn.TTL_TOO_LONG
        if not entry.covers(command.tenant):
            return authn.OUT_OF_SCOPE
        return None


def _keyring_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The keyring files ``paths`` name, folders expanded to their ``*.keyring.yaml`` files
    (sorted), each file once, in order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.glob(f"*{KEYRING_SUFFIX}") if p.is_file())
            if not found:
                raise ConfigurationError(
                    "invalid_keyring", f"{path}: folder holds no *{KEYRING_SUFFIX} files"
                )
            files.extend(found)
        else:
            files.append(path)
    if not files:
        raise ConfigurationError("invalid_keyring", "no keyring file given")
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(file.resolve(), file)
    return list(unique.values())


# --------------------------------------------------------------------------- CLI: keygen


def keygen(
    out_dir: Path,
    key_id: str,
    operator: str,
    tenants: list[str],
    *,
    max_ttl_seconds: float | None = None,
) -> tuple[Path, Path]:
    """Create a key pair for ``operator``: write ``<key_id>.pem`` (mode 0600, the operator keeps
    it) and ``<key_id>.keyring.yaml`` (a one-entry keyring document the workers' keyring merges).

    Refuses to overwrite an existing private key file. Returns ``(pem_path, keyring_path)``.
    """
    if not _SAFE_KEY_ID.fullmatch(key_id):
        raise ConfigurationError(
            "invalid_keyring",
            f"key {key_id!r}: key_id must match {_SAFE_KEY_ID.pattern} (it names files)",
        )
    private_pem, public_b64 = generate_keypair()
    entry: dict[str, Any] = {
        "key_id": key_id,
        "operator": operator,
        "public_key": public_b64,
        "tenants": list(tenants),
    }
    if max_ttl_seconds is not None:
        entry["max_ttl_seconds"] = max_ttl_seconds
    document = {"keys": [entry]}
    out_dir.mkdir(parents=True, exist_ok=True)
    pem_path = out_dir / f"{key_id}.pem"
    keyring_path = out_dir / f"{key_id}{KEYRING_SUFFIX}"
    Keyring.from_document(document, source=str(keyring_path))  # validate before writing
    try:
        fd = os.open(pem_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigurationError(
            "invalid_keyring", f"{pem_path}: key {key_id!r}: private key file already exists"
        ) from None
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(private_pem)
    keyring_path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return pem_path, keyring_path
