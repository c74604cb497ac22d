"""The Helm chart: ``helm lint`` and ``helm template`` for the default values and a values file
with every option on (ci/full-values.yaml); every rendered manifest validated OFFLINE against the
Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields fail) for the oldest and
newest Kubernetes the chart supports, and the prometheus-operator kinds against the schemas
below. Then what the manifests must say: probes, non-root read-only pods, CLI arguments the real
parser accepts, settings the processor knows, a tool registry it loads, no Secret rendered."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from processor.kafka.acls import Role, acl_bindings, parse_principals
from processor.registry_file import load_registry
from processor.settings import Settings
from tests.deploy.conftest import CHART, cli_accepts

FULL = CHART / "ci" / "full-values.yaml"
MCP = CHART / "ci" / "mcp-values.yaml"  # the executor as `executor mcp`
K8S_VERSIONS = ("1.27.0", "1.37.0")  # Chart.yaml kubeVersion >=1.27, and the newest schemas
VALUES = {"default": [], "full": ["-f", str(FULL)], "mcp": ["-f", str(MCP)]}

# prometheus-operator CRDs (monitoring.coreos.com/v1): the fields this chart uses, unknown
# fields rejected as the API server's structural schema would.
_STR = {"type": "string"}
_LABELS = {"type": "object", "additionalProperties": _STR}
_META = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": _STR, "namespace": _STR, "labels": _LABELS, "annotations": _LABELS},
    "additionalProperties": False,
}
_DURATION = {"type": "string", "pattern": "^(([0-9]+)(y|w|d|h|m|s|ms))+$"}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": _LABELS},
                        "additionalProperties": False,
                    },
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {"matchNames": {"type": "array", "items": _STR}},
                        "additionalProperties": False,
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["port"],
                            "additionalProperties": False,
                            "properties": {
                                "port": _STR,
                                "path": _STR,
                                "interval": _DURATION,
                                "scrapeTimeout": _DURATION,
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": _STR,
                                "interval": _DURATION,
                                "rules": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "required": ["alert", "expr"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "alert": {"type": "string", "pattern": "^[A-Za-z]+$"},
                                            "expr": {"type": "string", "minLength": 1},
                                            "for": _DURATION,
                                            "labels": _LABELS,
                                            "annotations": _LABELS,
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, check=False, timeout=120)


def render(helm: str, *extra: str) -> list[dict[str, Any]]:
    done = run_helm(helm, "template", "tcp", str(CHART), "--namespace", "agents", *extra)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=sorted(VALUES))
def rendered(request: pytest.FixtureRequest, helm: str) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(helm, *VALUES[request.param])


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "Job")]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pod = doc["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_helm_lint(helm: str, name: str) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), *VALUES[name])
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_manifest_validates_offline(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = rendered
    problems = []
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in CRD_SCHEMAS:
            validator = jsonschema.Draft202012Validator(CRD_SCHEMAS[doc["kind"]])
            problems += [f"{where}: {e.message}" for e in validator.iter_errors(doc)]
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{where} (k8s {version}): {exc.message}")
    assert problems == []


def test_offline_validation_catches_mistakes(helm: str) -> None:
    deployment = next(d for d in render(helm) if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)
    rule = next(d for d in render(helm, "-f", str(FULL)) if d["kind"] == "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["expression"] = "up"
    assert list(jsonschema.Draft202012Validator(CRD_SCHEMAS["PrometheusRule"]).iter_errors(rule))


def test_rendered_kinds(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = rendered
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    base = [
        "ConfigMap/tcp-toolcall-processor-tools",
        "Deployment/tcp-toolcall-processor-worker",
        "Job/tcp-toolcall-processor-topics",
        "PodDisruptionBudget/tcp-toolcall-processor-worker",
        "Service/tcp-toolcall-processor-worker",
        "ServiceAccount/tcp-toolcall-processor",
    ]
    full = [
        "ConfigMap/tcp-toolcall-processor-dashboard",
        "Deployment/tcp-toolcall-processor-executor",
        "PodDisruptionBudget/tcp-toolcall-processor-executor",
        "PrometheusRule/tcp-toolcall-processor",
        "Service/tcp-toolcall-processor-executor",
        "ServiceMonitor/tcp-toolcall-processor",
    ]
    executor = [k for k in full if k.endswith("-executor")]
    expected = {"default": base, "full": base + full, "mcp": base + executor}[name]
    assert kinds == sorted(expected)
    # operators' private keys, SASL passwords and TLS keys are referenced, never rendered
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_pods_are_non_root_read_only_and_bounded(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    for doc in workloads(docs):
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["automountServiceAccountToken"] is False
        assert any(v["name"] == "tmp" and "emptyDir" in v for v in pod["volumes"])
        for c in containers(doc):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            assert any(m["mountPath"] == "/tmp" for m in c["volumeMounts"])


def test_long_running_pods_have_health_and_readiness_probes(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    for doc in (d for d in docs if d["kind"] == "Deployment"):
        for c in containers(doc):
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert {p["name"] for p in c["ports"]} == {"metrics"}
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["PROCESSOR_METRICS_PORT"] == str(c["ports"][0]["containerPort"])


def test_container_arguments_parse_with_the_cli(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    for doc in workloads(docs):
        for c in containers(doc):
            assert cli_accepts(c["args"]) is None, (doc["metadata"]["name"], c["args"])


def test_environment_names_are_processor_settings(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    from processor.mcp.settings import McpSettings

    fields = set(Settings.model_fields) | {f"mcp_{f}" for f in McpSettings.model_fields}
    for doc in workloads(docs):
        for c in containers(doc):
            for e in c["env"]:
                assert e["name"].startswith("PROCESSOR_"), e["name"]
                field = e["name"].removeprefix("PROCESSOR_").lower().split("__")[0]
                assert field in fields, e["name"]
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                assert ref is None or ref["name"], e["name"]


def test_keyring_secret_is_mounted_where_the_worker_reads_it(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, docs = rendered
    for doc in (d for d in docs if d["kind"] == "Deployment"):
        pod = doc["spec"]["template"]["spec"]
        keyring = next(v for v in pod["volumes"] if v["name"] == "keyring")
        assert keyring["secret"]["secretName"]
        c = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["keyring"]["readOnly"] is True
        assert env["PROCESSOR_KEYRING_FILE"] == mounts["keyring"]["mountPath"]


def test_worker_state_dir_is_a_volume(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, docs = rendered
    worker = next(
        d for d in docs if d["kind"] == "Deployment" and "worker" in d["metadata"]["name"]
    )
    pod = worker["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert env["PROCESSOR_STATE_DIR"] == mounts["state"]["mountPath"]
    assert int(env["PROCESSOR_STATE_CACHE_MB"]) > 0
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state["emptyDir"]["sizeLimit"]


def test_tool_registry_configmap_loads_as_a_registry(
    rendered: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    _, docs = rendered
    cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-tools")
    )
    path = tmp_path / "tools.yaml"
    path.write_text(cm["data"]["tools.yaml"])
    registry = load_registry(path)
    assert registry is not None


def test_replicas_never_exceed_partitions(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = rendered
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    if name == "full":
        values["topics"].update(yaml.safe_load(FULL.read_text())["topics"])
    job = next(d for d in docs if d["kind"] == "Job")
    args = containers(job)[0]["args"]
    partitions = int(args[args.index("--partitions") + 1])
    assert partitions == values["topics"]["partitions"]
    for doc in (d for d in docs if d["kind"] == "Deployment"):
        assert doc["spec"]["replicas"] <= partitions
        assert doc["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--set", "worker.replicas=7"], "must not exceed topics.partitions"),
        (["--set", "executor.enabled=true", "--set", "executor.replicas=9"], "executor.replicas"),
        (["--set", "keyring.existingSecret="], "keyring.existingSecret is required"),
        (["--set", "worker.replica=2"], "additional properties 'replica' not allowed"),
        (["--set", "kafka.securityProtocol=SASL"], "securityProtocol"),
        (["--set", "kafka.sasl.enabled=true"], "kafka.sasl.existingSecret is required"),
        (
            ["--set", "executor.enabled=true", "--set", "executor.mode=mcp"],
            "executor.mcp.serverCommand or executor.mcp.serverUrl is required",
        ),
        (["--set", "executor.mode=lambda"], "value must be one of 'run', 'mcp'"),
        (["--set", "topics.init.acls.principals.gateway=User:g"], "gateway"),
        (["--set", "topics.init.acls.principals.follower=gateway"], "follower"),
    ],
)
def test_bad_values_are_refused(helm: str, overrides: list[str], message: str) -> None:
    done = run_helm(helm, "template", "tcp", str(CHART), *overrides)
    assert done.returncode != 0
    assert message in done.stderr


def test_prometheus_rule_carries_the_shared_rules_file(helm: str) -> None:
    docs = render(helm, "-f", str(FULL))
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    shared = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())["groups"]
    extra = yaml.safe_load(FULL.read_text())["metrics"]["prometheusRule"]["extraGroups"]
    assert rule["spec"]["groups"] == shared + extra
    dashboard = next(d for d in docs if d["metadata"]["name"].endswith("-dashboard"))
    on_disk = json.loads((CHART / "files" / "dashboards" / "toolcall-processor.json").read_text())
    assert json.loads(dashboard["data"]["toolcall-processor.json"]) == on_disk


def test_executor_runs_executor_mcp_with_its_headers_from_a_secret(helm: str) -> None:
    docs = render(helm, *VALUES["mcp"])
    [executor] = [d for d in workloads(docs) if d["metadata"]["name"].endswith("-executor")]
    [c] = containers(executor)
    assert c["args"][:2] == ["executor", "mcp"]
    assert c["args"][c["args"].index("--server-url") + 1] == (
        "https://bookings-mcp.agents.svc:8443/mcp"
    )
    assert c["args"][c["args"].index("--group") + 1] == "toolcall-mcp-bookings"
    assert "--handlers" not in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["PROCESSOR_MCP_HEADERS"]["valueFrom"]["secretKeyRef"] == {
        "name": "bookings-mcp-auth",
        "key": "headers",
    }
    stdio = render(
        helm,
        *VALUES["mcp"],
        "--set",
        "executor.mcp.serverUrl=",
        "--set",
        "executor.mcp.serverCommand=python -m bookings_mcp",
    )
    [executor] = [d for d in workloads(stdio) if d["metadata"]["name"].endswith("-executor")]
    [c] = containers(executor)
    assert c["args"][c["args"].index("--server-command") + 1] == "python -m bookings_mcp"
    assert cli_accepts(c["args"]) is None


def test_an_unsigned_test_cluster_passes_the_development_flag_to_every_component(
    helm: str,
) -> None:
    """Without a keyring a worker refuses every operator command (issue 30): a throwaway test
    cluster that asks for unsigned commands says so to the worker as to the executor."""
    unsigned = [
        "--set",
        "keyring.existingSecret=",
        "--set",
        "keyring.allowUnsignedOperatorCommands=true",
    ]
    flags = {"worker": "--allow-unsigned-commands", "executor": "--allow-unsigned-operators"}
    for extra, expected in (([], False), (unsigned, True)):
        docs = render(helm, "--set", "executor.enabled=true", *extra)
        for doc in (d for d in docs if d["kind"] == "Deployment"):
            [c] = doc["spec"]["template"]["spec"]["containers"]
            assert (flags[c["name"]] in c["args"]) is expected, (c["name"], c["args"])
            assert cli_accepts(c["args"]) is None, c["args"]


def test_the_topics_job_grants_the_acl_table_with_the_outcome_follower(helm: str) -> None:
    """Issue 40, item 4: the ACLs of docs/operations.md, the follower's READ on status, ledger,
    results and audit included, from ``topics.init.acls``, named for this release's groups."""
    [job] = [d for d in render(helm, "-f", str(FULL)) if d["kind"] == "Job"]
    args = containers(job)[0]["args"]
    assert cli_accepts(args) is None
    pairs = [args[i + 1] for i, arg in enumerate(args) if arg == "--acls-for"]
    principals = parse_principals(pairs)
    assert principals[Role.FOLLOWER] == "User:chat-gateway"
    assert "--apply-acls" in args
    settings = Settings(topic_prefix="prod.toolcalls.")
    follower = acl_bindings(settings, {Role.FOLLOWER: "User:chat-gateway"}, executor_group="x")
    assert {(b.name, b.operation.name) for b in follower} == {
        (f"prod.toolcalls.{t}", "READ") for t in ("status", "ledger", "results", "audit")
    }
    defaults = [d for d in render(helm) if d["kind"] == "Job"]
    assert all("--acls-for" not in containers(d)[0]["args"] for d in defaults)
