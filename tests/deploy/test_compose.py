"""docker-compose.yml, the Dockerfile and the Prometheus config, checked without a Docker engine:
the compose file against the compose-spec JSON schema (vendored by check-jsonschema), every
processor service's command against the real CLI parser, every mounted file's existence."""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.conftest import ROOT, cli_accepts

COMPOSE = ROOT / "docker-compose.yml"
PROCESSOR_IMAGE = "toolcall-processor:"
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR-default}`` interpolation."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, op, default = m["name"], m["op"], m["default"]
            if name in env and (env[name] or op != ":-"):
                return env[name]
            if op is None:
                raise AssertionError(f"${{{name}}} has no default")
            return default

        return _VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def compose_spec_schema() -> dict[str, Any]:
    ref = importlib.resources.files("check_jsonschema") / "builtin_schemas/vendor/compose-spec.json"
    schema: dict[str, Any] = json.loads(ref.read_text())
    return schema


def validator_for_compose() -> Any:
    schema = compose_spec_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE.read_text())
    doc: dict[str, Any] = interpolate(raw, env={})
    return doc


def test_compose_file_matches_the_compose_spec(compose: dict[str, Any]) -> None:
    validator = validator_for_compose()
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_compose_spec_check_catches_a_bad_file(compose: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["worker"]["imagee"] = "typo"
    broken["services"]["kafka"]["healthcheck"]["intervall"] = "5s"
    validator = validator_for_compose()
    assert len(list(validator.iter_errors(broken))) >= 2


def test_compose_has_the_whole_deployment(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "topics-init", "worker", "executor", "prometheus", "grafana"} <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    env = services["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, one node
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # scalable
    assert int(worker["deploy"]["replicas"]) >= 1
    assert worker["depends_on"]["topics-init"]["condition"] == "service_completed_successfully"
    assert services["topics-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"


@pytest.mark.parametrize("service", ["topics-init", "worker", "executor"])
def test_processor_services_run_read_only_and_non_root(
    compose: dict[str, Any], service: str
) -> None:
    spec = compose["services"][service]
    assert spec["image"].startswith(PROCESSOR_IMAGE)
    assert spec["read_only"] is True
    assert spec["user"].split(":")[0] not in ("0", "root")
    assert "/tmp" in spec["tmpfs"]
    assert spec["cap_drop"] == ["ALL"]


def test_every_processor_command_exists_in_the_cli(compose: dict[str, Any]) -> None:
    commands = {
        name: spec["command"]
        for name, spec in compose["services"].items()
        if str(spec.get("image", "")).startswith(PROCESSOR_IMAGE) and "entrypoint" not in spec
    }  # (an entrypoint of its own: not `processor`, e.g. the example MCP server)
    assert set(commands) == {"topics-init", "worker", "executor", "mcp-executor"}
    problems = {name: cli_accepts(argv) for name, argv in commands.items()}
    assert problems == dict.fromkeys(commands)


def test_cli_check_rejects_unknown_commands_and_flags() -> None:
    assert cli_accepts(["worker", "--no-such-flag"]) is not None
    assert cli_accepts(["workers"]) is not None
    assert cli_accepts(["executor", "run"]) is not None  # --handlers is required


def test_mounted_files_exist(compose: dict[str, Any]) -> None:
    for name, spec in compose["services"].items():
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


def test_worker_state_dir_is_a_volume(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    state_dir = worker["environment"]["PROCESSOR_STATE_DIR"]
    assert state_dir in [v.split(":")[0] for v in worker["volumes"]]  # writable, per container
    assert worker["environment"]["PROCESSOR_BOOTSTRAP_SERVERS"]  # the shared env is kept
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"install -d -o 10001 -g 10001 -m 0700 {state_dir}" in dockerfile


def test_prometheus_scrapes_workers_and_executors() -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {
        name
        for job in config["scrape_configs"]
        for sd in job.get("dns_sd_configs", [])
        for name in sd["names"]
        if sd["port"] == 9400
    }
    assert targets == {"worker", "executor"}
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yaml"]


def test_grafana_provisioning_points_at_the_dashboard() -> None:
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/toolcall-processor.yaml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboards = ROOT / "helm/toolcall-processor/files/dashboards"
    assert sorted(p.name for p in dashboards.glob("*.json")) == ["toolcall-processor.json"]


def test_dockerfile_is_slim_non_root_with_a_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    assert all("slim" in s for s in stages)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert re.search(r"^ARG VERSION", text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*?/healthz", text, re.M)
    assert re.search(r'^ENTRYPOINT \["processor"\]', text, re.M)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ignored[ignored.index("*") :][:1] == ["*"]  # deny by default, allow-list after
    copied = set(re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M))
    for line in copied:
        for source in line.split():
            assert f"!{source.rstrip('/')}" in {i.rstrip("/") for i in ignored}, source
            assert Path(ROOT / source).exists()
