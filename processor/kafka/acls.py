"""The ACLs each principal needs (README "ACLs each principal needs"), as data, printed or applied.

One table, :data:`ROLE_GRANTS`, says what each role may do; :func:`acl_bindings` turns it into
concrete Kafka ACL bindings for a deployment (topic names from the settings' prefix, the worker's
group and transactional-id prefix, the executor group) and a set of principals (role → principal,
e.g. ``worker=User:assembler``). Nothing else is granted: a secured broker with
``allow.everyone.if.no.acl.found=false`` refuses every other operation.

=================  ==============================================================================
role               grants
=================  ==============================================================================
adapter (gateway)  WRITE fragments, control
worker             READ fragments, control; READ + WRITE dispatch, proposals, status, ledger,
                   audit, deadletter, changelog; READ group ``group_id``; WRITE + DESCRIBE
                   transactional ids prefixed ``{application_id}-``; CLUSTER_ACTION on the cluster
executor           READ dispatch, control; READ + WRITE executions, results, status; READ its
                   group; WRITE + DESCRIBE transactional ids prefixed ``{group}.executor.``;
                   CLUSTER_ACTION on the cluster
operator           WRITE control
auditor            READ audit
follower (agent)   READ status, ledger, results, audit (:class:`processor.OutcomeFollower`: no
                   group, manual assignment; ``results`` holds tool outputs)
=================  ==============================================================================

Kafka ACLs stop at the topic: a principal that may READ ``results`` reads every tenant's tool
outputs on it. The follower hands a turn only the records keyed by that turn's own tenant and
turn id; a deployment whose gateways must not even receive another tenant's outputs gives each
tenant its own topic prefix (and principals).

WRITE and READ imply DESCRIBE on a topic (metadata), and WRITE on a topic implies the idempotent
producer's IDEMPOTENT_WRITE (KIP-679), so neither is listed.

READ on the output topics and CLUSTER_ACTION are what a task needs to find and abort a hanging
transaction of its own producer id (:mod:`processor.kafka.hanging`): DescribeProducers needs
READ on the topic, WriteTxnMarkers CLUSTER_ACTION on the cluster. CLUSTER_ACTION is the brokers'
own permission (it also allows writing markers on any partition and fetching as a replica);
without it a task with such a transaction is held, never committed over.

:func:`format_commands` renders the bindings as ``kafka-acls.sh`` commands; :func:`apply_acls`
creates them through the Kafka protocol (CreateAcls v1) with an admin client whose principal may
alter the cluster's ACLs.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Final

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest

from processor.core.errors import ConfigurationError, Described
from processor.settings import Settings


class Role(StrEnum):
    ADAPTER = "adapter"
    WORKER = "worker"
    EXECUTOR = "executor"
    OPERATOR = "operator"
    AUDITOR = "auditor"
    FOLLOWER = "follower"


class ResourceType(IntEnum):
    """Kafka's resource type codes (AclResourceType)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(IntEnum):
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    """Kafka's ACL operation codes (AclOperation)."""

    READ = 3
    WRITE = 4
    DESCRIBE = 8
    CLUSTER_ACTION = 9


_ALLOW: Final = 3  # AclPermissionType.ALLOW
_ANY_HOST: Final = "*"

# role → (resource type, pattern, which name, operations); the names are resolved per deployment
# by _resource_name: topic roles from TopicNames, and the group / transactional-id names below.
_Grant = tuple[ResourceType, PatternType, str, tuple[Operation, ...]]
_R, _W, _D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
_T, _G, _X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
_C, _CA = ResourceType.CLUSTER, Operation.CLUSTER_ACTION
_LIT, _PRE = PatternType.LITERAL, PatternType.PREFIXED

ROLE_GRANTS: Final[Mapping[Role, tuple[_Grant, ...]]] = {
    Role.ADAPTER: ((_T, _LIT, "fragments", (_W,)), (_T, _LIT, "control", (_W,))),
    Role.WORKER: (
        (_T, _LIT, "fragments", (_R,)),
        (_T, _LIT, "control", (_R,)),
        (_T, _LIT, "changelog", (_R, _W)),
        *((_T, _LIT, out, (_R, _W)) for out in ("dispatch", "proposals", "status", "ledger")),
        (_T, _LIT, "audit", (_R, _W)),
        (_T, _LIT, "deadletter", (_R, _W)),
        (_G, _LIT, "worker-group", (_R,)),
        (_X, _PRE, "worker-transactions", (_W, _D)),
        (_C, _LIT, "cluster", (_CA,)),
    ),
    Role.EXECUTOR: (
        (_T, _LIT, "dispatch", (_R,)),
        (_T, _LIT, "control", (_R,)),
        (_T, _LIT, "executions", (_R, _W)),
        (_T, _LIT, "results", (_R, _W)),
        (_T, _LIT, "status", (_R, _W)),
        (_G, _LIT, "executor-group", (_R,)),
        (_X, _PRE, "executor-transactions", (_W, _D)),
        (_C, _LIT, "cluster", (_CA,)),
    ),
    Role.OPERATOR: ((_T, _LIT, "control", (_W,)),),
    Role.AUDITOR: ((_T, _LIT, "audit", (_R,)),),
    Role.FOLLOWER: tuple(
        (_T, _LIT, out, (_R,)) for out in ("status", "ledger", "results", "audit")
    ),
}


@dataclass(frozen=True)
class AclBinding:
    """One ALLOW ACL: ``principal`` may ``operation`` on the resource, from any host."""

    principal: str
    resource_type: ResourceType
    pattern: PatternType
    name: str
    operation: Operation

    def kafka_acls_args(self) -> list[str]:
        """The ``kafka-acls.sh`` arguments that create this binding."""
        operation = self.operation.name.title().replace("_", "")  # ClusterAction
        args = ["--add", "--allow-principal", self.principal, "--operation", operation]
        if self.resource_type is ResourceType.CLUSTER:
            return [*args, "--cluster"]
        flag = {
            ResourceType.TOPIC: "--topic",
            ResourceType.GROUP: "--group",
            ResourceType.TRANSACTIONAL_ID: "--transactional-id",
        }[self.resource_type]
        args += [flag, self.name]
        if self.pattern is PatternType.PREFIXED:
            args += ["--resource-pattern-type", "prefixed"]
        return args


class AclError(Described, ConfigurationError):
    """A principal mapping is invalid or the broker refused to create an ACL."""

    reason = "acl"


def parse_principals(items: Iterable[str]) -> dict[Role, str]:
    """``["worker=User:assembler", ...]`` → {Role.WORKER: "User:assembler", ...}."""
    out: dict[Role, str] = {}
    for item in items:
        role_name, sep, principal = item.partition("=")
        if not sep or not principal.strip():
            raise AclError(f"expected ROLE=PRINCIPAL (e.g. worker=User:assembler), got {item!r}")
        try:
            role = Role(role_name.strip())
        except ValueError:
            roles = ", ".join(r.value for r in Role)
            raise AclError(f"unknown role {role_name!r} (one of {roles})") from None
        principal = principal.strip()
        if ":" not in principal:
            principal = f"User:{principal}"
        out[role] = principal
    return out


def acl_bindings(
    settings: Settings, principals: Mapping[Role, str], *, executor_group: str
) -> list[AclBinding]:
    """The bindings of :data:`ROLE_GRANTS` for these principals, in table order."""
    names = {
        **settings.topics.all(),
        "worker-group": settings.group_id,
        "worker-transactions": f"{settings.application_id}-",
        "executor-group": executor_group,
        "executor-transactions": f"{executor_group}.executor.",
        "cluster": "kafka-cluster",  # Kafka's one cluster resource name
    }
    out: list[AclBinding] = []
    for role, principal in principals.items():
        for resource_type, pattern, which, operations in ROLE_GRANTS[role]:
            out += [
                AclBinding(principal, resource_type, pattern, names[which], op) for op in operations
            ]
    return out


def format_commands(bindings: Iterable[AclBinding], bootstrap: str) -> list[str]:
    """One ``kafka-acls.sh`` command line per binding (add ``--command-config`` for auth)."""
    head = ["kafka-acls.sh", "--bootstrap-server", bootstrap]
    return [shlex.join([*head, *b.kafka_acls_args()]) for b in bindings]


async def apply_acls(admin: AIOKafkaAdminClient, bindings: Iterable[AclBinding]) -> int:
    """Create every binding (CreateAcls is idempotent); return how many were sent."""
    count = 0
    for b in bindings:
        request = CreateAclsRequest(
            b.resource_type, b.name, b.pattern, b.principal, _ANY_HOST, b.operation, _ALLOW
        )
        # aiokafka's admin client has no create_acls method; the protocol request is public
        response = await admin._send_request(request)
        for code, message in response.creation_responses:
            if code:
                raise AclError(
                    f"creating {b.operation.name} on {b.resource_type.name} {b.name!r} for "
                    f"{b.principal}: {for_code(code).__name__} {message or ''}".strip()
                )
        count += 1
    return count
