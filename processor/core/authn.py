"""Authentication of operator commands, as the core sees it: a protocol and the rejection codes.

This module owns the seam between the sans-IO core and the cryptography that authenticates
operator commands (``response.quarantined``, ``tool.disabled``, ``tool.enabled``,
``tenant.stopped``, ``tenant.resumed``). The core depends only on :class:`CommandVerifier`; the
Ed25519 implementation, :class:`processor.ops.signing.Keyring`, lives in ``processor.ops`` so that
the core never imports ``cryptography`` (ARCHITECTURE.md §6).

A verifier answers one question: may this command be applied at time ``now``? It returns ``None``
for yes, or one of the stable rejection codes below (they go to the audit record and to metrics).
A verifier is pure: the caller passes ``now``; there is no clock and no IO inside ``verify``.

With no keyring at all a worker uses :class:`NoKeyring`, which refuses every operator command
(``unsigned``, or ``unknown_key`` for a signed one). :class:`AllowUnsigned` is only ever chosen
explicitly (offline replay, tests, ``processor worker --allow-unsigned-commands``). A verifier is
never tested for truth: an empty keyring is refused when it is loaded, and ``None`` is not a
verifier (ARCHITECTURE.md: fail closed on an empty verifier).

Replay protection is **not** a verifier's job: the Assembler keeps the command ids it has seen in
its per-partition state (which survives restarts through the changelog) and rejects a repeated
``command_id`` itself.
"""

from __future__ import annotations

from typing import Final, Protocol

from processor.core.events import OperatorCommand

# Stable rejection codes returned by CommandVerifier.verify (snake_case, used in audit and metrics).
UNSIGNED: Final = "unsigned"
"""No ``signature`` or no ``key_id``."""
UNKNOWN_KEY: Final = "unknown_key"
"""``key_id`` names no key of the keyring."""
BAD_SIGNATURE: Final = "bad_signature"
"""The signature does not verify over the canonical bytes (or is not valid base64)."""
ISSUER_MISMATCH: Final = "issuer_mismatch"
"""Validly signed, but ``issued_by`` is not the operator the key belongs to."""
NO_EXPIRY: Final = "no_expiry"
"""``expires_at`` is missing (or not a finite number)."""
EXPIRED: Final = "expired"
"""``now`` is later than ``expires_at``."""
NOT_YET_VALID: Final = "not_yet_valid"
"""``issued_at`` is more than the clock-skew allowance in the future of ``now``."""
TTL_TOO_LONG: Final = "ttl_too_long"
"""``expires_at - issued_at`` exceeds the key's maximum lifetime."""
OUT_OF_SCOPE: Final = "out_of_scope"
"""The command's target tenant (or a global command) is outside the key's tenant scope."""

REJECTION_CODES: Final = frozenset(
    {
        UNSIGNED,
        UNKNOWN_KEY,
        BAD_SIGNATURE,
        ISSUER_MISMATCH,
        NO_EXPIRY,
        EXPIRED,
        NOT_YET_VALID,
        TTL_TOO_LONG,
        OUT_OF_SCOPE,
    }
)


class CommandVerifier(Protocol):
    """Decides whether an operator command may be applied at time ``now`` (epoch seconds).

    Returns ``None`` when it may, else a stable rejection code from :data:`REJECTION_CODES`.
    Must be pure: no clock, no IO, no mutation.
    """

    def verify(self, command: OperatorCommand, now: float) -> str | None: ...


class AllowUnsigned:
    """A verifier that accepts EVERY operator command, signed or not, valid or not.

    !!! FOR OFFLINE REPLAY AND TESTS ONLY. NEVER USE IT IN A DEPLOYED WORKER. !!!

    With this verifier anyone who can write to the ``control`` topic can quarantine responses,
    disable tools and stop tenants (or resume and re-enable them). Production workers must use
    :class:`processor.ops.signing.Keyring`.
    """

    def verify(self, command: OperatorCommand, now: float) -> str | None:
        del command, now
        return None


class NoKeyring:
    """The verifier of a worker that has no keyring: it refuses EVERY operator command.

    An unsigned command is ``unsigned``; a signed one names a key nobody trusts
    (``unknown_key``). Each refusal is audited by the caller, as for any rejection.
    """

    def verify(self, command: OperatorCommand, now: float) -> str | None:
        del now
        if not command.signature or not command.key_id:
            return UNSIGNED
        return UNKNOWN_KEY
