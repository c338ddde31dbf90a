"""deploy/k8s validated offline (issue 13): core kinds against the Kubernetes schemas
that ``kubernetes-validate`` ships (strict: an unknown or misspelled field fails), the
operators' kinds and every cross-reference by ``k8s_checks.problems`` — and each check
shown to fail on a manifest broken on purpose."""

from __future__ import annotations

import copy
import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kubernetes_validate
import pytest

from tests.unit.k8s_checks import (
    CORE_API_VERSIONS,
    ENTRY_POINTS,
    K8S,
    KUBERNETES_VERSION,
    Doc,
    alternatives,
    load_yaml,
    manifests,
    named,
    problems,
)


def test_kustomization_lists_every_manifest() -> None:
    listed = set(load_yaml(K8S / "kustomization.yaml")[0]["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


@pytest.mark.parametrize(
    "doc",
    [d for d in manifests() + alternatives() if d["apiVersion"] in CORE_API_VERSIONS],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_core_kinds_match_the_kubernetes_schema(doc: Doc) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_rejects_a_misspelled_field() -> None:
    dep = copy.deepcopy(named(manifests(), "Deployment")["agentloom-prepare"])
    dep["spec"]["replica"] = dep["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, KUBERNETES_VERSION, strict=True)


def test_manifests_reference_each_other_and_our_code() -> None:
    assert problems(manifests() + alternatives()) == []


def _doc(docs: list[Doc], kind: str, name: str) -> Doc:
    return named(docs, kind)[name]


def _env(docs: list[Doc], deployment: str) -> list[Doc]:
    env: list[Doc] = _doc(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][
        0
    ]["env"]
    return env


def _named_env(docs: list[Doc], deployment: str, name: str) -> Doc:
    return next(e for e in _env(docs, deployment) if e["name"] == name)


# (what is broken, how, a phrase the problem must contain)
BREAKAGES: list[tuple[str, Callable[[list[Doc]], None], str]] = [
    (
        "topic label",
        lambda d: _doc(d, "KafkaTopic", "ctx.records")["metadata"]["labels"].update(
            {"strimzi.io/cluster": "other"}
        ),
        "names no Kafka",
    ),
    (
        "topic partitions",
        lambda d: _doc(d, "KafkaTopic", "ctx.deadletter")["spec"].update(partitions=12),
        "ALC_TOPIC_PARTITIONS=24",
    ),
    (
        "a topic missing",
        lambda d: d.remove(_doc(d, "KafkaTopic", "ctx.observability")),
        "the topics our processes use",
    ),
    (
        "secret key",
        lambda d: _named_env(d, "agentloom-prepare", "ALC_PG_PASSWORD")["valueFrom"][
            "secretKeyRef"
        ].update(key="url"),
        "missing Secret key",
    ),
    (
        "setting name",
        lambda d: _env(d, "agentloom-analytics").append({"name": "ALC_METRIC_PORT", "value": "1"}),
        "is not a setting",
    ),
    (
        "setting value",
        lambda d: _named_env(d, "agentloom-analytics", "ALC_METRICS_PORT").update(value="nine"),
        "do not validate",
    ),
    (
        "pdb selector",
        lambda d: _doc(d, "PodDisruptionBudget", "agentloom-compaction")["spec"]["selector"][
            "matchLabels"
        ].update({"app.kubernetes.io/name": "agentloom-compactor"}),
        "selector matches 0 Deployments",
    ),
    (
        "kafka isr",
        lambda d: _doc(d, "Kafka", "agentloom")["spec"]["kafka"]["config"].update(
            {"min.insync.replicas": 1}
        ),
        "min.insync.replicas=1",
    ),
    (
        "keda group",
        lambda d: _doc(d, "ScaledObject", "agentloom-compaction")["spec"]["triggers"][0][
            "metadata"
        ].update(consumerGroup="agentloom-session-processor"),
        "compaction group's lag",
    ),
    (
        "probe missing",
        lambda d: _doc(d, "Deployment", "agentloom-processor")["spec"]["template"]["spec"][
            "containers"
        ][0].pop("livenessProbe"),
        "no livenessProbe",
    ),
    (
        "unknown kind",
        lambda d: d.append({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {}}),
        "neither a core kind",
    ),
]


@pytest.mark.parametrize(("what", "break_it", "phrase"), BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_a_broken_reference_is_named(
    what: str, break_it: Callable[[list[Doc]], None], phrase: str
) -> None:
    docs = copy.deepcopy(manifests())
    break_it(docs)
    found = problems(docs)
    assert any(phrase in p for p in found), f"{what}: {found}"


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_deployment_runs_a_real_entry_point(name: str) -> None:
    module = ENTRY_POINTS[name]
    container = _doc(manifests(), "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", module]
    assert importlib.util.find_spec(f"{module}.__main__") is not None


def _run_probe(tmp_path: Path, env: dict[str, str], *args: str) -> int:
    script = tmp_path / "probe.py"
    script.write_text(_doc(manifests(), "ConfigMap", "agentloom-probes")["data"]["probe.py"])
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ALC_")} | env
    done = subprocess.run(
        [sys.executable, str(script), *args], env=full_env, capture_output=True, timeout=20
    )
    return done.returncode


def test_the_dependency_probe_needs_kafka_and_postgres_to_answer(tmp_path: Path) -> None:
    with socket.socket() as open_port, socket.socket() as closed_port:
        open_port.bind(("127.0.0.1", 0))
        open_port.listen()
        closed_port.bind(("127.0.0.1", 0))  # bound, never listening: connects are refused
        up, down = open_port.getsockname()[1], closed_port.getsockname()[1]
        dsn = f"postgresql://u@127.0.0.1:{up}/db"
        ok = {"ALC_KAFKA_BOOTSTRAP": f"127.0.0.1:{up}", "ALC_PG_DSN": dsn}
        assert _run_probe(tmp_path, ok, "deps") == 0
        kafka_down = ok | {"ALC_KAFKA_BOOTSTRAP": f"127.0.0.1:{up},127.0.0.1:{down}"}
        assert _run_probe(tmp_path, kafka_down, "deps") == 1
        pg_down = ok | {"ALC_PG_DSN": f"postgresql://u@127.0.0.1:{down}/db"}
        assert _run_probe(tmp_path, pg_down, "deps") == 1
        assert _run_probe(tmp_path, ok, "http", f"http://127.0.0.1:{down}/metrics") == 1
