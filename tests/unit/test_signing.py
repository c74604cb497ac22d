"""Operator command signing: round trips, every rejection code, keyring loading, keygen."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.core import authn
from processor.core.authn import AllowUnsigned, CommandVerifier
from processor.core.errors import ConfigurationError
from processor.core.events import (
    OperatorCommand,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
)
from processor.ops.signing import (
    CLOCK_SKEW_SECONDS,
    DEFAULT_MAX_TTL_SECONDS,
    Keyring,
    OperatorSigner,
    canonical_bytes,
    generate_keypair,
    keygen,
)

NOW = 1_700_000_000.0
PRIV, PUB = generate_keypair()
OTHER_PRIV, OTHER_PUB = generate_keypair()


def keyring(**overrides: Any) -> Keyring:
    entry: dict[str, Any] = {
        "key_id": "k1",
        "operator": "alice",
        "public_key": PUB,
        "tenants": ["acme"],
    }
    entry.update(overrides)
    glob = {"key_id": "kg", "operator": "root", "public_key": OTHER_PUB, "tenants": ["*"]}
    # "k1-twin" holds the same public key as k1: swapping key_id must still break the signature.
    twin = {**entry, "key_id": "k1-twin"}
    return Keyring.from_document({"keys": [entry, glob, twin]}, source="test.yaml")


SIGNER = OperatorSigner(PRIV, key_id="k1", issued_by="alice")
GLOBAL_SIGNER = OperatorSigner(OTHER_PRIV, key_id="kg", issued_by="root")

COMMON: dict[str, Any] = {
    "command_id": "cmd-1",
    "issued_by": "someone",
    "issued_at": NOW,
    "expires_at": NOW + 300,
    "reason": "incident 42",
}


def commands() -> list[OperatorCommand]:
    return [
        ResponseQuarantined(**COMMON, tenant="acme", turn_id="t1", response_id="r1"),
        ToolDisabled(**COMMON, tool="send_email", tenant="acme"),
        ToolEnabled(**COMMON, tool="send_email", tenant="acme"),
        TenantStopped(**COMMON, tenant="acme"),
        TenantResumed(**COMMON, tenant="acme"),
    ]


def ids(cmds: list[OperatorCommand]) -> list[str]:
    return [c.type for c in cmds]


def mutate(command: OperatorCommand, **changes: Any) -> OperatorCommand:
    """A validated copy of ``command`` with ``changes`` applied (type changes re-dispatch)."""
    data = command.model_dump(mode="json")
    data.update(changes)
    by_type = {
        cls.model_fields["type"].default: cls
        for cls in (ResponseQuarantined, ToolDisabled, ToolEnabled, TenantStopped, TenantResumed)
    }
    return by_type[data["type"]].model_validate(data)


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("command", commands(), ids=ids(commands()))
def test_round_trip(command: OperatorCommand) -> None:
    signed = SIGNER.sign(command)
    assert type(signed) is type(command)
    assert signed.key_id == "k1"
    assert signed.issued_by == "alice"
    assert signed.signature is not None
    assert len(base64.b64decode(signed.signature)) == 64
    assert keyring().verify(signed, NOW) is None
    # The original is untouched (frozen models, copy on sign).
    assert command.signature is None


@pytest.mark.parametrize("command", commands(), ids=ids(commands()))
def test_round_trip_through_the_wire(command: OperatorCommand) -> None:
    signed = SIGNER.sign(command)
    decoded = mutate(signed)
    assert decoded == signed
    assert keyring().verify(decoded, NOW) is None


def test_canonical_bytes_exclude_signature_and_sort_keys() -> None:
    cmd = TenantStopped(**COMMON, tenant="acme")
    raw = canonical_bytes(cmd)
    data = orjson.loads(raw)
    assert "signature" not in data
    assert list(data) == sorted(data)
    assert b" " not in raw.replace(b"incident 42", b"")
    for field in (
        "type",
        "v",
        "tenant",
        "issued_at",
        "expires_at",
        "key_id",
        "issued_by",
        "command_id",
        "reason",
    ):
        assert field in data
    assert canonical_bytes(SIGNER.sign(cmd)) == canonical_bytes(
        cmd.model_copy(update={"key_id": "k1", "issued_by": "alice"})
    )


def test_keyring_is_a_command_verifier() -> None:
    verifiers: list[CommandVerifier] = [keyring(), AllowUnsigned()]
    assert verifiers


def test_allow_unsigned_accepts_everything() -> None:
    cmd = TenantStopped(**COMMON, tenant="acme")
    assert AllowUnsigned().verify(cmd, NOW) is None
    assert AllowUnsigned().verify(cmd.model_copy(update={"signature": "junk"}), 0.0) is None


def test_every_code_is_listed() -> None:
    assert {
        "unsigned",
        "unknown_key",
        "issuer_mismatch",
        "bad_signature",
        "expired",
        "no_expiry",
        "not_yet_valid",
        "ttl_too_long",
        "out_of_scope",
    } == authn.REJECTION_CODES


# --------------------------------------------------------------------------- rejections


def test_unsigned() -> None:
    cmd = TenantStopped(**COMMON, tenant="acme")
    assert keyring().verify(cmd, NOW) == "unsigned"
    signed = SIGNER.sign(cmd)
    assert keyring().verify(signed.model_copy(update={"signature": None}), NOW) == "unsigned"
    assert keyring().verify(signed.model_copy(update={"signature": ""}), NOW) == "unsigned"
    assert keyring().verify(signed.model_copy(update={"key_id": None}), NOW) == "unsigned"


def test_unknown_key() -> None:
    signer = OperatorSigner(PRIV, key_id="nope", issued_by="alice")
    assert (
        keyring().verify(signer.sign(TenantStopped(**COMMON, tenant="acme")), NOW) == "unknown_key"
    )


def test_issuer_mismatch() -> None:
    # Validly signed with k1's private key, but claiming to be bob.
    liar = OperatorSigner(PRIV, key_id="k1", issued_by="bob")
    assert keyring().verify(liar.sign(TenantStopped(**COMMON, tenant="acme")), NOW) == (
        "issuer_mismatch"
    )


def test_signed_by_another_key() -> None:
    thief = OperatorSigner(OTHER_PRIV, key_id="k1", issued_by="alice")
    assert keyring().verify(thief.sign(TenantStopped(**COMMON, tenant="acme")), NOW) == (
        "bad_signature"
    )


def _tamper_cases() -> list[tuple[OperatorCommand, dict[str, Any]]]:
    rq, td, te, ts, tr = commands()
    return [
        # every common field
        (ts, {"command_id": "cmd-2"}),
        (ts, {"issued_by": "mallory"}),
        (ts, {"issued_at": NOW - 1}),
        (ts, {"expires_at": NOW + 299}),
        (ts, {"expires_at": None}),
        (ts, {"reason": "innocent"}),
        (ts, {"key_id": "k1-twin"}),
        # the command type
        (ts, {"type": "tenant.resumed"}),
        (tr, {"type": "tenant.stopped"}),
        (td, {"type": "tool.enabled"}),
        (te, {"type": "tool.disabled"}),
        # the target
        (ts, {"tenant": "globex"}),
        (td, {"tenant": None}),
        (td, {"tool": "delete_all"}),
        (rq, {"tenant": "globex"}),
        (rq, {"turn_id": "t2"}),
        (rq, {"response_id": "r2"}),
    ]


@pytest.mark.parametrize(
    ("command", "change"),
    _tamper_cases(),
    ids=[f"{c.type}-{next(iter(ch))}" for c, ch in _tamper_cases()],
)
def test_tampered_field_is_bad_signature(command: OperatorCommand, change: dict[str, Any]) -> None:
    ring = keyring(tenants=["acme", "globex"])
    signed = SIGNER.sign(command)
    assert ring.verify(signed, NOW) is None
    tampered = mutate(signed, **change)
    assert tampered != signed
    assert ring.verify(tampered, NOW) == "bad_signature"


def test_tampered_version_is_bad_signature() -> None:
    # `v` is Literal[1] on the wire, so forge the change below the model's validation.
    signed = SIGNER.sign(TenantStopped(**COMMON, tenant="acme"))
    forged = signed.model_copy(update={"v": 2})
    assert canonical_bytes(forged) != canonical_bytes(signed)
    assert keyring().verify(forged, NOW) == "bad_signature"


@pytest.mark.parametrize(
    "signature",
    [
        "not base64!!",
        "AAAA",  # valid base64, wrong length
        base64.b64encode(b"\x00" * 64).decode(),  # right length, wrong bytes
        "é" * 10,
        "@@@@",
    ],
)
def test_malformed_signature(signature: str) -> None:
    signed = SIGNER.sign(TenantStopped(**COMMON, tenant="acme"))
    bad = signed.model_copy(update={"signature": signature})
    assert keyring().verify(bad, NOW) == "bad_signature"


def test_non_canonical_base64_signature() -> None:
    signed = SIGNER.sign(TenantStopped(**COMMON, tenant="acme"))
    assert signed.signature is not None
    # Same bytes, different text: padding stripped / a non-zero trailing bit / urlsafe alphabet.
    sig = signed.signature
    variants = [sig.rstrip("=")]
    last = sig.rstrip("=")[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    flipped = alphabet[alphabet.index(last) ^ 1]
    variants.append(sig.rstrip("=")[:-1] + flipped + "=" * (len(sig) - len(sig.rstrip("="))))
    for variant in variants:
        assert variant != sig
        assert keyring().verify(signed.model_copy(update={"signature": variant}), NOW) == (
            "bad_signature"
        )


def test_expired() -> None:
    signed = SIGNER.sign(TenantStopped(**COMMON, tenant="acme"))
    assert signed.expires_at is not None
    assert keyring().verify(signed, signed.expires_at) is None
    assert keyring().verify(signed, signed.expires_at + 0.001) == "expired"


def test_no_expiry() -> None:
    signed = SIGNER.sign(TenantStopped(**{**COMMON, "expires_at": None}, tenant="acme"))
    assert keyring().verify(signed, NOW) == "no_expiry"


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_expiry_is_no_expiry(value: float) -> None:
    with pytest.raises(ValueError, match="finite"):  # the wire contract refuses it first
        TenantStopped(**{**COMMON, "expires_at": value}, tenant="acme")
    # and the verifier still refuses a command built around the contract
    built = TenantStopped(**COMMON, tenant="acme").model_copy(update={"expires_at": value})
    assert keyring().verify(SIGNER.sign(built), NOW) == "no_expiry"


def test_not_yet_valid() -> None:
    skew = CLOCK_SKEW_SECONDS
    ok = SIGNER.sign(
        TenantStopped(
            **{**COMMON, "issued_at": NOW + skew, "expires_at": NOW + skew + 10}, tenant="acme"
        )
    )
    assert keyring().verify(ok, NOW) is None
    early = SIGNER.sign(
        TenantStopped(
            **{**COMMON, "issued_at": NOW + skew + 1, "expires_at": NOW + skew + 10},
            tenant="acme",
        )
    )
    assert keyring().verify(early, NOW) == "not_yet_valid"


def test_ttl_too_long_default() -> None:
    at_limit = SIGNER.sign(
        TenantStopped(**{**COMMON, "expires_at": NOW + DEFAULT_MAX_TTL_SECONDS}, tenant="acme")
    )
    assert keyring().verify(at_limit, NOW) is None
    too_long = SIGNER.sign(
        TenantStopped(**{**COMMON, "expires_at": NOW + DEFAULT_MAX_TTL_SECONDS + 1}, tenant="acme")
    )
    assert keyring().verify(too_long, NOW) == "ttl_too_long"


def test_ttl_too_long_per_key() -> None:
    signed = SIGNER.sign(TenantStopped(**COMMON, tenant="acme"))  # ttl 300
    assert keyring(max_ttl_seconds=300).verify(signed, NOW) is None
    assert keyring(max_ttl_seconds=299.5).verify(signed, NOW) == "ttl_too_long"


@pytest.mark.parametrize("command", commands(), ids=ids(commands()))
def test_out_of_scope(command: OperatorCommand) -> None:
    signed = SIGNER.sign(command)
    assert keyring(tenants=["globex"]).verify(signed, NOW) == "out_of_scope"
    assert keyring(tenants=["globex", "acme"]).verify(signed, NOW) is None
    assert keyring(tenants=["*"]).verify(signed, NOW) is None


@pytest.mark.parametrize("cls", [ToolDisabled, ToolEnabled])
def test_global_command_needs_wildcard(cls: type[ToolDisabled | ToolEnabled]) -> None:
    cmd = cls(**COMMON, tool="send_email", tenant=None)
    ring = keyring(tenants=["acme", "globex"])
    assert ring.verify(SIGNER.sign(cmd), NOW) == "out_of_scope"
    assert ring.verify(GLOBAL_SIGNER.sign(cmd), NOW) is None  # kg has ["*"]


def test_signature_checked_before_time_and_scope() -> None:
    # A forged command that is also expired and out of scope reads as bad_signature.
    signed = SIGNER.sign(TenantStopped(**COMMON, tenant="acme"))
    forged = mutate(signed, tenant="globex")
    assert keyring().verify(forged, NOW + 10_000) == "bad_signature"


# --------------------------------------------------------------------------- property


_STRING_FIELDS: dict[str, tuple[str, ...]] = {
    "response.quarantined": (
        "command_id",
        "issued_by",
        "reason",
        "key_id",
        "tenant",
        "turn_id",
        "response_id",
    ),
    "tool.disabled": ("command_id", "issued_by", "reason", "key_id", "tenant", "tool"),
    "tool.enabled": ("command_id", "issued_by", "reason", "key_id", "tenant", "tool"),
    "tenant.stopped": ("command_id", "issued_by", "reason", "key_id", "tenant"),
    "tenant.resumed": ("command_id", "issued_by", "reason", "key_id", "tenant"),
}

# text every string field accepts (identifiers are visible ASCII; a tenant has no "/" or "*")
_TEXT = st.from_regex(r"[!-)+-.0-~]{1,40}", fullmatch=True)


@st.composite
def _string_change(draw: st.DrawFn) -> tuple[OperatorCommand, str, str]:
    command = draw(st.sampled_from(commands()))
    field = draw(st.sampled_from(_STRING_FIELDS[command.type]))
    value = draw(_TEXT)
    return command, field, value


# The key_id change must land on a key the ring knows, so verification reaches the signature.
_RING = Keyring.from_document(
    {
        "keys": [
            {"key_id": "k1", "operator": "alice", "public_key": PUB, "tenants": ["*"]},
        ]
    }
)


@settings(max_examples=300, deadline=None)
@given(_string_change())
def test_any_string_change_breaks_the_signature(change: tuple[OperatorCommand, str, str]) -> None:
    command, field, value = change
    signed = SIGNER.sign(command)
    if getattr(signed, field) == value:
        return
    tampered = mutate(signed, **{field: value})
    assert canonical_bytes(tampered) != canonical_bytes(signed)
    ring = _RING
    if field == "key_id":
        ring = Keyring.from_document(
            {
                "keys": [
                    {"key_id": "k1", "operator": "alice", "public_key": PUB, "tenants": ["*"]},
                    {"key_id": value, "operator": "alice", "public_key": PUB, "tenants": ["*"]},
                ]
            }
        )
    assert ring.verify(signed, NOW) is None
    assert ring.verify(tampered, NOW) == "bad_signature"


# --------------------------------------------------------------------------- keyring loading


def _write(path: Path, doc: object) -> Path:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_load_yaml_and_json(tmp_path: Path) -> None:
    doc = {
        "keys": [
            {
                "key_id": "k1",
                "operator": "alice",
                "public_key": PUB,
                "tenants": ["acme"],
                "max_ttl_seconds": 900,
            }
        ]
    }
    ring_y = Keyring.load(_write(tmp_path / "ring.yaml", doc))
    json_path = tmp_path / "ring.json"
    json_path.write_bytes(orjson.dumps(doc))
    ring_j = Keyring.load(json_path)
    for ring in (ring_y, ring_j):
        assert len(ring) == 1
        assert "k1" in ring
        entry = ring.get("k1")
        assert entry is not None
        assert entry.max_ttl_seconds == 900.0
        assert entry.tenants == frozenset({"acme"})
        assert ring.verify(SIGNER.sign(TenantStopped(**COMMON, tenant="acme")), NOW) is None


def test_load_empty_key_list(tmp_path: Path) -> None:
    """An emptied keyring is refused (issue 30: it used to load, falsy, and switch checks off);
    built in memory, an empty one trusts nobody."""
    with pytest.raises(ConfigurationError, match="holds no key"):
        Keyring.load(_write(tmp_path / "ring.yaml", {"keys": []}))
    ring = Keyring([], source="empty")
    assert ring.verify(SIGNER.sign(TenantStopped(**COMMON, tenant="acme")), NOW) == "unknown_key"


def _entry(**overrides: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "key_id": "ops-key-7",
        "operator": "alice",
        "public_key": PUB,
        "tenants": ["acme"],
    }
    e.update(overrides)
    return {k: v for k, v in e.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (_entry(public_key="not base64!"), "base64"),
        (_entry(public_key=base64.b64encode(b"x" * 31).decode()), "32"),
        (_entry(public_key=_DROP), "public_key"),
        (_entry(operator=""), "operator"),
        (_entry(operator=_DROP), "operator"),
        (_entry(tenants=[]), "tenants"),
        (_entry(tenants="acme"), "tenants"),
        (_entry(tenants=["acme", 3]), "tenants"),
        (_entry(max_ttl_seconds=0), "max_ttl_seconds"),
        (_entry(max_ttl_seconds=-5), "max_ttl_seconds"),
        (_entry(max_ttl_seconds="10"), "max_ttl_seconds"),
        (_entry(max_ttl_seconds=True), "max_ttl_seconds"),
        (_entry(max_ttl_seconds=float("inf")), "max_ttl_seconds"),
        (_entry(tenant=["acme"]), "unknown field"),
    ],
)
def test_load_errors_name_file_and_key(tmp_path: Path, entry: dict[str, Any], words: str) -> None:
    path = _write(tmp_path / "ring.yaml", {"keys": [entry]})
    with pytest.raises(ConfigurationError) as info:
        Keyring.load(path)
    message = str(info.value)
    assert str(path) in message
    assert "ops-key-7" in message
    assert words in message


def test_load_duplicate_key_id(tmp_path: Path) -> None:
    path = _write(tmp_path / "ring.yaml", {"keys": [_entry(), _entry(operator="bob")]})
    with pytest.raises(ConfigurationError, match=r"ops-key-7.*duplicate") as info:
        Keyring.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ([1, 2], "not a mapping"),
        ({"key": []}, "unknown top-level"),
        ({"keys": {"a": 1}}, "'keys' must be a list"),
        ({"keys": ["x"]}, "#0"),
        ({"keys": [_entry(key_id="")]}, "key_id"),
    ],
)
def test_load_document_errors(tmp_path: Path, doc: object, words: str) -> None:
    path = _write(tmp_path / "ring.yaml", doc)
    with pytest.raises(ConfigurationError) as info:
        Keyring.load(path)
    assert str(path) in str(info.value)
    assert words in str(info.value)


def test_load_unreadable_and_unparsable(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigurationError, match=r"missing\.yaml"):
        Keyring.load(missing)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("keys: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"bad\.yaml"):
        Keyring.load(bad_yaml)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{nope", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"bad\.json"):
        Keyring.load(bad_json)


def test_load_merges_files_and_keyring_folders(tmp_path: Path) -> None:
    folder = tmp_path / "keyring.d"
    keygen(folder, "ops-alice-1", "alice", ["acme"])
    keygen(folder, "ops-root-1", "root", ["*"])
    (folder / "notes.yaml").write_text("not: a keyring\n", encoding="utf-8")  # not *.keyring.yaml
    extra = _write(tmp_path / "extra.yaml", {"keys": [_entry()]})
    ring = Keyring.load(folder, extra)
    assert len(ring) == 3
    assert all(k in ring for k in ("ops-alice-1", "ops-root-1", "ops-key-7"))
    assert str(folder / "ops-alice-1.keyring.yaml") in ring.source and str(extra) in ring.source
    assert ring.verify(SIGNER.sign(TenantStopped(**COMMON, tenant="acme")), NOW) == "unknown_key"
    # a file named twice (itself and through its folder) is read once
    assert len(Keyring.load(folder, folder / "ops-root-1.keyring.yaml")) == 2


def test_load_duplicate_key_id_across_files_names_both(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.keyring.yaml", {"keys": [_entry()]})
    second = _write(tmp_path / "b.yaml", {"keys": [_entry(operator="bob")]})
    with pytest.raises(ConfigurationError, match=r"'ops-key-7'.*duplicate") as info:
        Keyring.load(first, second)
    assert str(first) in str(info.value) and str(second) in str(info.value)
    assert len(Keyring.load(tmp_path)) == 1  # the folder: a.keyring.yaml only
    with pytest.raises(ConfigurationError, match="duplicate") as info:
        Keyring.load(tmp_path, second)
    assert str(first) in str(info.value) and str(second) in str(info.value)


def test_load_needs_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no keyring file"):
        Keyring.load()
    (tmp_path / "ring.yaml").write_text("keys: []\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"no \*\.keyring\.yaml files") as info:
        Keyring.load(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_from_document_source_in_error() -> None:
    with pytest.raises(ConfigurationError, match=r"inline-src.*'k9'"):
        Keyring.from_document({"keys": [_entry(key_id="k9", tenants=[])]}, source="inline-src")


# --------------------------------------------------------------------------- signer


def test_signer_rejects_non_ed25519_or_garbage() -> None:
    with pytest.raises(ConfigurationError, match="k1"):
        OperatorSigner(b"not a pem", key_id="k1", issued_by="alice")
    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ConfigurationError, match="Ed25519"):
        OperatorSigner(ec_pem, key_id="k1", issued_by="alice")


def test_generate_keypair_shapes() -> None:
    pem, pub = generate_keypair()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert len(base64.b64decode(pub, validate=True)) == 32
    assert OperatorSigner(pem, key_id="x", issued_by="y").public_key_b64 == pub
    assert isinstance(Ed25519PrivateKey.generate(), Ed25519PrivateKey)


# --------------------------------------------------------------------------- keygen


def test_keygen_writes_key_and_keyring_entry(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    pem_path, ring_path = keygen(out, "ops-alice-1", "alice", ["acme", "globex"])
    assert pem_path == out / "ops-alice-1.pem"
    assert ring_path == out / "ops-alice-1.keyring.yaml"
    assert stat.S_IMODE(pem_path.stat().st_mode) == 0o600

    ring = Keyring.load(ring_path)
    entry = ring.get("ops-alice-1")
    assert entry is not None
    assert entry.operator == "alice"
    assert entry.tenants == frozenset({"acme", "globex"})

    signer = OperatorSigner(pem_path.read_bytes(), key_id="ops-alice-1", issued_by="alice")
    signed = signer.sign(TenantStopped(**COMMON, tenant="globex"))
    assert ring.verify(signed, NOW) is None
    assert ring.verify(signer.sign(TenantStopped(**COMMON, tenant="other")), NOW) == (
        "out_of_scope"
    )


def test_keygen_max_ttl_and_refuses_overwrite(tmp_path: Path) -> None:
    _, ring_path = keygen(tmp_path, "k", "alice", ["*"], max_ttl_seconds=60)
    entry = Keyring.load(ring_path).get("k")
    assert entry is not None
    assert entry.max_ttl_seconds == 60.0
    with pytest.raises(ConfigurationError, match="already exists"):
        keygen(tmp_path, "k", "alice", ["*"])


@pytest.mark.parametrize("key_id", ["../evil", "a/b", "", ".hidden"])
def test_keygen_rejects_unsafe_key_id(tmp_path: Path, key_id: str) -> None:
    with pytest.raises(ConfigurationError):
        keygen(tmp_path, key_id, "alice", ["acme"])


def test_keygen_rejects_bad_entry(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="tenants"):
        keygen(tmp_path, "k2", "alice", [])
    assert not (tmp_path / "k2.pem").exists()
