"""Offline checks of deploy/k8s (issue 13), used by test_k8s_manifests.py.

Core kinds (Namespace, ConfigMap, Deployment, Service, PodDisruptionBudget, HPA) against
the Kubernetes OpenAPI schemas that ``kubernetes-validate`` ships, in strict mode (an
unknown or misspelled field fails). The operators' kinds (Strimzi, CloudNativePG, KEDA)
have no schema here, so they are checked structurally and cross-referenced with each
other, with the workloads and with our own code: topic names and settings from
``schemas.settings`` / ``streams.kafka.topics``, entry points that exist. ``problems`` returns
every broken reference as a sentence; the negative tests break one thing each and expect
it to be named.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from schemas.settings import Settings
from streams.kafka.topics import topic_names

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"  # the oldest version we support: its schemas are the strictest
CORE_API_VERSIONS = {"v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v2"}
# Custom resources: (apiVersion, kind) -> dotted paths that must be present.
CUSTOM_RESOURCES: dict[tuple[str, str], list[str]] = {
    ("kafka.strimzi.io/v1beta2", "Kafka"): ["spec.kafka.listeners", "spec.kafka.config"],
    ("kafka.strimzi.io/v1beta2", "KafkaNodePool"): ["spec.replicas", "spec.roles", "spec.storage"],
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"): ["spec.partitions", "spec.replicas"],
    ("kafka.strimzi.io/v1beta2", "KafkaUser"): [
        "spec.authentication.type",
        "spec.authorization.acls",
    ],
    ("postgresql.cnpg.io/v1", "Cluster"): ["spec.instances", "spec.storage.size"],
    ("keda.sh/v1alpha1", "ScaledObject"): ["spec.scaleTargetRef.name", "spec.triggers"],
    ("keda.sh/v1alpha1", "TriggerAuthentication"): ["spec.secretTargetRef"],
}
# Secrets CloudNativePG creates for a Cluster named N: N-app (the owner's credentials).
# The broker settings the replicated deployment relies on (as deploy/kafka.sh --brokers 3).
KAFKA_CONFIG = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "auto.create.topics.enable": False,
}
ROLES = ("broker", "controller")
# Secrets Strimzi creates: one per KafkaUser N (SCRAM), and <kafka>-cluster-ca-cert.
STRIMZI_USER_KEYS = {"password", "sasl.jaas.config"}
STRIMZI_CA_KEYS = {"ca.crt", "ca.p12", "ca.password"}
# Secrets the operator creates by hand before the first apply (deploy/k8s/README.md).
MANUAL_SECRETS = {
    "agentloom-bus-prepare": {"signing-key"},
    "agentloom-bus-compaction": {"signing-key"},
    "agentloom-bus-verify": {"verify-keys", "key-issuer"},
    # deploy/k8s/db-logins.sh: a basic-auth Secret per database login (storage/roles.py)
    **{
        f"agentloom-pg-{role}": {"username", "password"}
        for role in ("processor", "prepare", "compaction", "analytics", "cli")
    },
}
CNPG_APP_KEYS = {"username", "password", "host", "port", "dbname", "uri", "jdbc-uri", "pgpass"}
ENTRY_POINTS = {
    "agentloom-processor": "streams",
    "agentloom-prepare": "services.prepare",
    "agentloom-compaction": "services.compaction",
    "agentloom-analytics": "services.analytics",
}
Doc = dict[str, Any]


@functools.cache
def _parse(path: Path) -> tuple[Doc, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(d for d in yaml.load_all(path.read_text("utf-8"), Loader=loader) if d)


def load_yaml(path: Path) -> list[Doc]:
    """The documents of one file, a fresh copy each call (tests break them)."""
    return copy.deepcopy(list(_parse(path)))


def manifests() -> list[Doc]:
    """Every resource ``kubectl apply -k deploy/k8s`` would apply."""
    kustomization = load_yaml(K8S / "kustomization.yaml")[0]
    return [d for name in kustomization["resources"] for d in load_yaml(K8S / name)]


def alternatives() -> list[Doc]:
    return [d for p in sorted((K8S / "alternatives").glob("*.yaml")) for d in load_yaml(p)]


def _get(doc: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def _of(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in _of(docs, kind)}


def _containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for dep in _of(docs, "Deployment"):
        for c in dep["spec"]["template"]["spec"]["containers"]:
            yield dep, c


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def settings_of(docs: list[Doc], extra: dict[str, str] | None = None) -> Settings:
    """The Settings a process gets from agentloom-config (+ its own env), every other
    field at its default — never from this test's environment."""
    values: dict[str, Any] = {n: f.default for n, f in Settings.model_fields.items()}
    env = {**named(docs, "ConfigMap")["agentloom-config"]["data"], **(extra or {})}
    values.update({k.removeprefix("ALC_").lower(): v for k, v in env.items()})
    return Settings(**values)


SETTING_NAMES = {"ALC_" + name.upper() for name in Settings.model_fields}


# --- cross-reference checks: each returns its problems as sentences -------------------


def check_custom_resources(docs: list[Doc]) -> list[str]:
    out = []
    for d in docs:
        if d["apiVersion"] in CORE_API_VERSIONS:
            continue
        required = CUSTOM_RESOURCES.get((d["apiVersion"], d["kind"]))
        if required is None:
            out.append(f"{d['apiVersion']} {d['kind']} is neither a core kind nor a known CRD")
            continue
        out += [
            f"{d['kind']}/{d['metadata']['name']} lacks {p}" for p in required if _get(d, p) is None
        ]
    return out


def check_kafka(docs: list[Doc]) -> list[str]:
    out = []
    kafkas = named(docs, "Kafka")
    for name, k in kafkas.items():
        notes = k["metadata"].get("annotations", {})
        if (
            notes.get("strimzi.io/kraft") != "enabled"
            or notes.get("strimzi.io/node-pools") != "enabled"
        ):
            out.append(f"Kafka/{name} is not KRaft with node pools")
        cfg = k["spec"]["kafka"]["config"]
        out += [
            f"Kafka/{name} {key}={cfg.get(key)!r}, want {v!r}"
            for key, v in KAFKA_CONFIG.items()
            if cfg.get(key) != v
        ]
    for pool in _of(docs, "KafkaNodePool"):
        if pool["metadata"].get("labels", {}).get("strimzi.io/cluster") not in kafkas:
            out.append(
                f"KafkaNodePool/{pool['metadata']['name']} names no Kafka in strimzi.io/cluster"
            )
    pools = _of(docs, "KafkaNodePool")
    nodes = {r: sum(p["spec"]["replicas"] for p in pools if r in p["spec"]["roles"]) for r in ROLES}
    if min(nodes.values()) < 3:
        out.append(f"node pools give {nodes} nodes per role, want >= 3 of each")
    return out


def check_topics(docs: list[Doc]) -> list[str]:
    out, s = [], settings_of(docs)
    kafkas = named(docs, "Kafka")
    topics = {t["spec"].get("topicName", t["metadata"]["name"]): t for t in _of(docs, "KafkaTopic")}
    if set(topics) != set(topic_names(s)):
        out.append(
            f"KafkaTopics {sorted(topics)} != the topics our processes use {sorted(topic_names(s))}"
        )
    for name, t in topics.items():
        if t["metadata"].get("labels", {}).get("strimzi.io/cluster") not in kafkas:
            out.append(f"KafkaTopic/{name}: label strimzi.io/cluster names no Kafka")
        spec = t["spec"]
        if (spec["partitions"], spec["replicas"]) != (s.topic_partitions, s.topic_replication):
            out.append(
                f"KafkaTopic/{name} has {spec['partitions']}x{spec['replicas']}, processes expect"
                f" ALC_TOPIC_PARTITIONS={s.topic_partitions}"
                f" x ALC_TOPIC_REPLICATION={s.topic_replication}"
            )
        isr = int(spec.get("config", {}).get("min.insync.replicas", 1))
        if not 2 <= isr < spec["replicas"]:
            out.append(
                f"KafkaTopic/{name} min.insync.replicas={isr}: acks=all must outlive one replica"
            )
    return out


def _bootstrap_problems(docs: list[Doc], bootstrap: str, where: str) -> list[str]:
    ports = {
        f"{k['metadata']['name']}-kafka-bootstrap:{lst['port']}"
        for k in _of(docs, "Kafka")
        for lst in k["spec"]["kafka"]["listeners"]
    }
    return (
        []
        if bootstrap in ports
        else [f"{where}: bootstrap {bootstrap} is not one of {sorted(ports)}"]
    )


def _keys(docs: list[Doc]) -> dict[tuple[str, str], set[str]]:
    """(kind, name) -> keys of every ConfigMap and Secret, with the Secrets the operators
    generate (CloudNativePG's ``<cluster>-app``, Strimzi's per KafkaUser and cluster CA) and
    the ones created by hand (``MANUAL_SECRETS``)."""
    keys = {
        (d["kind"], d["metadata"]["name"]): set(d.get("data", {})) | set(d.get("stringData", {}))
        for d in docs
        if d["kind"] in ("ConfigMap", "Secret")
    }
    keys |= {("Secret", f"{n}-app"): CNPG_APP_KEYS for n in named(docs, "Cluster")}
    keys |= {("Secret", n): STRIMZI_USER_KEYS for n in named(docs, "KafkaUser")}
    keys |= {("Secret", f"{n}-cluster-ca-cert"): STRIMZI_CA_KEYS for n in named(docs, "Kafka")}
    keys |= {("Secret", n): k for n, k in MANUAL_SECRETS.items()}
    return keys


def _env_problems(e: Doc, keys: dict[tuple[str, str], set[str]]) -> list[str]:
    out = [] if e["name"] in SETTING_NAMES else [f"env {e['name']} is not a setting"]
    for kind, ref_kind in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
        ref = e.get("valueFrom", {}).get(ref_kind)
        if ref and ref["key"] not in keys.get((kind, ref["name"]), set()):
            out.append(f"env {e['name']} reads a missing {kind} key {ref['name']}/{ref['key']}")
    return out


def check_env(docs: list[Doc]) -> list[str]:
    keys = _keys(docs)
    shared = named(docs, "ConfigMap")["agentloom-config"]["data"]
    out = [f"agentloom-config: {k} is not a setting" for k in shared if k not in SETTING_NAMES]
    out += _bootstrap_problems(docs, shared.get("ALC_KAFKA_BOOTSTRAP", ""), "agentloom-config")
    for dep, c in _containers(docs):
        where = f"{dep['metadata']['name']}/{c['name']}"
        for src in c.get("envFrom", []):
            if ("ConfigMap", src.get("configMapRef", {}).get("name")) not in keys:
                out.append(f"{where}: envFrom names a missing ConfigMap {src}")
        out += [f"{where}: {p}" for e in c.get("env", []) for p in _env_problems(e, keys)]
        literal = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
        try:
            settings_of(docs, literal)
        except ValueError as exc:  # pydantic's ValidationError: a value of the wrong type
            out.append(f"{where}: settings do not validate: {exc}")
    return out


def check_workloads(docs: list[Doc]) -> list[str]:
    out = []
    configmaps = named(docs, "ConfigMap")
    for dep, c in _containers(docs):
        where, pod = f"{dep['metadata']['name']}/{c['name']}", dep["spec"]["template"]["spec"]
        if not _matches(
            dep["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"]
        ):
            out.append(f"{where}: selector does not match the pod template")
        res = c.get("resources", {})
        if not {"cpu", "memory"} <= set(res.get("requests", {})) or "memory" not in res.get(
            "limits", {}
        ):
            out.append(f"{where}: needs cpu+memory requests and a memory limit")
        ports = {p.get("name") for p in c.get("ports", [])} | {
            p["containerPort"] for p in c.get("ports", [])
        }
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for kind in ("livenessProbe", "readinessProbe"):
            probe = c.get(kind)
            if probe is None:
                out.append(f"{where}: no {kind}")
            elif "httpGet" in probe and probe["httpGet"]["port"] not in ports:
                out.append(
                    f"{where}: {kind} port {probe['httpGet']['port']} is not a container port"
                )
            elif "exec" in probe:
                out += _exec_probe_problems(
                    where, kind, probe["exec"]["command"], c, volumes, configmaps
                )
    return out


def _exec_probe_problems(
    where: str,
    kind: str,
    command: list[str],
    c: Doc,
    volumes: dict[str, Doc],
    configmaps: dict[str, Doc],
) -> list[str]:
    script = Path(command[1])
    for m in c.get("volumeMounts", []):
        if script.parent == Path(m["mountPath"]):
            cm = volumes.get(m["name"], {}).get("configMap", {}).get("name")
            if script.name in configmaps.get(cm, {}).get("data", {}):
                return []
    return [f"{where}: {kind} runs {script}, which no mounted ConfigMap provides"]


def check_selectors(docs: list[Doc]) -> list[str]:
    out = []
    deployments = _of(docs, "Deployment")
    for kind, path in (
        ("PodDisruptionBudget", "spec.selector.matchLabels"),
        ("Service", "spec.selector"),
    ):
        for d in _of(docs, kind):
            hits = [
                x
                for x in deployments
                if _matches(_get(d, path) or {}, x["spec"]["template"]["metadata"]["labels"])
            ]
            if len(hits) != 1:
                out.append(
                    f"{kind}/{d['metadata']['name']}: selector matches {len(hits)} Deployments"
                )
            elif kind == "Service":
                ports = {
                    p.get("name")
                    for c in hits[0]["spec"]["template"]["spec"]["containers"]
                    for p in c.get("ports", [])
                }
                out += [
                    f"Service/{d['metadata']['name']}: targetPort {p['targetPort']} is not a port"
                    for p in d["spec"]["ports"]
                    if p["targetPort"] not in ports
                ]
    covered = {
        p["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/name")
        for p in _of(docs, "PodDisruptionBudget")
    }
    out += [
        f"Deployment/{d['metadata']['name']} has no PodDisruptionBudget"
        for d in deployments
        if d["metadata"]["name"] not in covered
    ]
    return out


def check_scaling(docs: list[Doc]) -> list[str]:
    out, s = [], settings_of(docs)
    deployments = named(docs, "Deployment")
    for so in _of(docs, "ScaledObject") + _of(docs, "HorizontalPodAutoscaler"):
        where, target = (
            f"{so['kind']}/{so['metadata']['name']}",
            so["spec"]["scaleTargetRef"]["name"],
        )
        if target not in deployments:
            out.append(f"{where} scales a missing Deployment {target}")
        top = so["spec"].get("maxReplicaCount", so["spec"].get("maxReplicas", 0))
        if top > s.topic_partitions:
            out.append(
                f"{where} may scale to {top} > {s.topic_partitions} partitions (idle consumers)"
            )
        for t in so["spec"].get("triggers", []):
            m = t["metadata"]
            if t["type"] != "kafka" or (m.get("consumerGroup"), m.get("topic")) != (
                s.compaction_group,
                s.topic_compaction_requests,
            ):
                out.append(
                    f"{where}: trigger {t['type']} {m} does not watch the compaction group's lag"
                )
            out += _bootstrap_problems(docs, m.get("bootstrapServers", ""), where)
        if (
            target in deployments
            and deployments[target]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
            != "services.compaction"
        ):
            out.append(f"{where} scales {target}, which is not the compaction worker")
    return out


CHECKS: list[Callable[[list[Doc]], list[str]]] = [
    check_custom_resources,
    check_kafka,
    check_topics,
    check_env,
    check_workloads,
    check_selectors,
    check_scaling,
]


def problems(docs: list[Doc]) -> list[str]:
    return [p for check in CHECKS for p in check(docs)]
