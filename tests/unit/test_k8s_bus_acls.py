"""deploy/k8s ships the authenticated bus (R3.3): one Strimzi KafkaUser per principal
whose ACLs are exactly ``domain.bus_access.acl_plan`` for the names the deployment runs
with (so the two cannot drift), a TLS + SCRAM-SHA-512 listener with the simple
authorizer, and every Deployment logging in as its own principal, with its own bus secret
only where an envelope is signed or checked: no service holds another's."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import PurePosixPath

import pytest

from domain.bus_access import ROLES, Acl, Op, Pattern, Resource, acl_plan
from schemas.settings import Settings
from streams.kafka.provision import bus_names
from tests.unit.k8s_checks import K8S, Doc, load_yaml, manifests, named, settings_of

pytestmark = pytest.mark.spec("R3.3")

USERS_API = "kafka.strimzi.io/v1beta2"
CLUSTER = "agentloom"
CA_SECRET = f"{CLUSTER}-cluster-ca-cert"
# Deployment -> the bus Secret it mounts, its keys and the settings that name the files.
BUS_SECRETS = {
    "agentloom-prepare": (
        "agentloom-bus-prepare",
        {"signing-key": "ALC_BUS_SIGNING_KEY_FILE"},
    ),
    "agentloom-compaction": (
        "agentloom-bus-compaction",
        {"signing-key": "ALC_BUS_SIGNING_KEY_FILE"},
    ),
    "agentloom-processor": (
        "agentloom-bus-verify",
        {"verify-keys": "ALC_BUS_VERIFY_KEYS_FILE", "key-issuer": "ALC_KEY_ISSUER_SECRET_FILE"},
    ),
}
# Deployment -> the principal its process logs in as (streams.kafka.auth.kafka_auth's role).
PRINCIPALS = {
    "agentloom-processor": "processor",
    "agentloom-prepare": "prepare",
    "agentloom-compaction": "compaction",
    "agentloom-analytics": "analytics",
}
# The runtime principals of users.yaml (README.md: adding a runtime).
RUNTIMES = ("runtime",)
# Strimzi's names (KafkaUser spec.authorization.acls) for ours.
RESOURCES = {"topic": Resource.TOPIC, "group": Resource.GROUP, "cluster": Resource.CLUSTER}
PATTERNS = {"literal": Pattern.LITERAL, "prefix": Pattern.PREFIXED}
OPERATIONS = {
    "Read": Op.READ,
    "Write": Op.WRITE,
    "Create": Op.CREATE,
    "Describe": Op.DESCRIBE,
    "DescribeConfigs": Op.DESCRIBE_CONFIGS,
}


def user_acls(user: Doc) -> set[Acl]:
    """A KafkaUser's ACLs as ours; KeyError on a Strimzi value we do not map."""
    principal = f"User:{user['metadata']['name']}"
    out = set()
    for rule in user["spec"]["authorization"]["acls"]:
        res = rule["resource"]
        assert rule.get("host", "*") == "*", f"{principal}: host-restricted ACL {rule}"
        assert rule.get("type", "allow") == "allow", f"{principal}: deny ACL {rule}"
        assert "operation" not in rule, f"{principal}: the deprecated single `operation`"
        for op in rule["operations"]:
            out.add(
                Acl(
                    principal,
                    RESOURCES[res["type"]],
                    res["name"],
                    PATTERNS[res.get("patternType", "literal")],
                    OPERATIONS[op],
                )
            )
    return out


def acl_problems(docs: list[Doc]) -> list[str]:
    """Where the KafkaUsers differ from acl_plan for the deployment's settings."""
    users = named(docs, "KafkaUser")
    out = []
    principals = {r for r in ROLES if r != "runtime"} | set(RUNTIMES)
    if set(users) != principals:
        out.append(f"KafkaUsers {sorted(users)} != the principals {sorted(principals)}")
    plan = acl_plan(bus_names(settings_of(docs)), RUNTIMES)
    for name, user in users.items():
        want = {a for a in plan if a.principal == f"User:{name}"}
        got = user_acls(user)
        out += [f"KafkaUser/{name} lacks {a}" for a in sorted(want - got)]
        out += [f"KafkaUser/{name} grants more than the plan: {a}" for a in sorted(got - want)]
    return out


def _container(docs: list[Doc], deployment: str) -> Doc:
    c: Doc = named(docs, "Deployment")[deployment]["spec"]["template"]["spec"]["containers"][0]
    return c


def _env(docs: list[Doc], deployment: str) -> dict[str, Doc]:
    return {e["name"]: e for e in _container(docs, deployment).get("env", [])}


def _secret_ref(e: Doc | None) -> tuple[str, str] | None:
    ref = (e or {}).get("valueFrom", {}).get("secretKeyRef")
    return (ref["name"], ref["key"]) if ref else None


# --- the plan and the users ----------------------------------------------------------


def test_users_yaml_is_applied_and_holds_only_kafka_users() -> None:
    assert "users.yaml" in load_yaml(K8S / "kustomization.yaml")[0]["resources"]
    docs = load_yaml(K8S / "users.yaml")
    assert {(d["apiVersion"], d["kind"]) for d in docs} == {(USERS_API, "KafkaUser")}


def test_the_deployment_runs_with_the_production_names() -> None:
    assert bus_names(settings_of(manifests())) == bus_names(Settings.model_construct())


def test_each_kafka_user_has_exactly_the_acls_of_the_plan() -> None:
    assert acl_problems(manifests()) == []


@pytest.mark.parametrize("name", sorted(set(ROLES) - {"runtime"} | set(RUNTIMES)))
def test_each_kafka_user_logs_in_with_scram_in_our_cluster(name: str) -> None:
    user = named(manifests(), "KafkaUser")[name]
    assert user["metadata"]["labels"]["strimzi.io/cluster"] in named(manifests(), "Kafka")
    assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
    assert user["spec"]["authorization"]["type"] == "simple"


# (what is broken, how, a phrase the problem must contain)
DRIFTS: list[tuple[str, Callable[[list[Doc]], None], str]] = [
    (
        "an operation dropped",
        lambda d: named(d, "KafkaUser")["processor"]["spec"]["authorization"]["acls"][0][
            "operations"
        ].remove("Read"),
        "KafkaUser/processor lacks",
    ),
    (
        "an operation added",
        lambda d: named(d, "KafkaUser")["runtime"]["spec"]["authorization"]["acls"][0][
            "operations"
        ].append("Read"),
        "KafkaUser/runtime grants more than the plan",
    ),
    (
        "literal widened to prefix",
        lambda d: named(d, "KafkaUser")["analytics"]["spec"]["authorization"]["acls"][-1][
            "resource"
        ].update(patternType="prefix"),
        "KafkaUser/analytics grants more than the plan",
    ),
    (
        "a principal missing",
        lambda d: d.remove(named(d, "KafkaUser")["cli"]),
        "!= the principals",
    ),
    (
        "a group renamed in the ConfigMap only",
        lambda d: named(d, "ConfigMap")["agentloom-config"]["data"].update(
            ALC_COMPACTION_GROUP="agentloom-compaction-v2"
        ),
        "KafkaUser/compaction lacks",
    ),
]


@pytest.mark.parametrize(("what", "break_it", "phrase"), DRIFTS, ids=[b[0] for b in DRIFTS])
def test_a_drift_from_the_plan_is_named(
    what: str, break_it: Callable[[list[Doc]], None], phrase: str
) -> None:
    docs = copy.deepcopy(manifests())
    break_it(docs)
    found = acl_problems(docs)
    assert any(phrase in p for p in found), f"{what}: {found}"


# --- the broker --------------------------------------------------------------------------


def test_every_listener_authenticates_over_tls_and_acls_are_enforced() -> None:
    docs = manifests()
    kafka = named(docs, "Kafka")[CLUSTER]["spec"]["kafka"]
    for listener in kafka["listeners"]:
        assert listener["tls"] is True, listener
        assert listener["authentication"] == {"type": "scram-sha-512"}, listener
    assert kafka["authorization"] == {"type": "simple"}  # no superUsers of ours
    bootstrap = named(docs, "ConfigMap")["agentloom-config"]["data"]["ALC_KAFKA_BOOTSTRAP"]
    assert bootstrap in {f"{CLUSTER}-kafka-bootstrap:{lst['port']}" for lst in kafka["listeners"]}


# --- the workloads -----------------------------------------------------------------------


@pytest.mark.parametrize("deployment", sorted(PRINCIPALS))
def test_each_deployment_logs_in_as_its_own_principal(deployment: str) -> None:
    docs = manifests()
    env, principal = _env(docs, deployment), PRINCIPALS[deployment]
    assert principal in named(docs, "KafkaUser")
    assert env["ALC_KAFKA_USERNAME"].get("value") == principal
    # The Secret the User Operator generates for the KafkaUser of the same name.
    assert _secret_ref(env["ALC_KAFKA_PASSWORD"]) == (principal, "password")
    assert env["ALC_KAFKA_SECURITY_PROTOCOL"].get("value") == "SASL_SSL"
    assert "ALC_KAFKA_SASL_MECHANISM" not in env  # the default, SCRAM-SHA-512
    assert Settings.model_fields["kafka_sasl_mechanism"].default == "SCRAM-SHA-512"


@pytest.mark.parametrize("deployment", sorted(PRINCIPALS))
def test_the_ca_file_is_the_mounted_cluster_ca(deployment: str) -> None:
    docs = manifests()
    pod = named(docs, "Deployment")[deployment]["spec"]["template"]["spec"]
    cafile = PurePosixPath(_env(docs, deployment)["ALC_KAFKA_SSL_CAFILE"]["value"])
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    provided = set()
    for m in _container(docs, deployment).get("volumeMounts", []):
        secret = volumes[m["name"]].get("secret", {})
        if secret.get("secretName") == CA_SECRET and "subPath" not in m:
            items = secret.get("items") or [{"key": "ca.crt", "path": "ca.crt"}]
            root = PurePosixPath(m["mountPath"])
            provided |= {root / i["path"] for i in items if i["key"] == "ca.crt"}
    assert cafile in provided, f"{deployment}: {cafile} is not {CA_SECRET}/ca.crt ({provided})"


def _mounted_files(docs: list[Doc], deployment: str) -> dict[str, tuple[str, str]]:
    """Mounted Secret files of a Deployment: path -> (Secret, key)."""
    pod = named(docs, "Deployment")[deployment]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    out = {}
    for m in _container(docs, deployment).get("volumeMounts", []):
        secret = volumes[m["name"]].get("secret")
        if secret and "subPath" not in m:  # a subPath mount never sees an update
            for item in secret.get("items", []):
                path = str(PurePosixPath(m["mountPath"]) / item["path"])
                out[path] = (secret["secretName"], item["key"])
    return out


@pytest.mark.parametrize("deployment", sorted(PRINCIPALS))
def test_each_process_gets_its_own_bus_secret_and_no_other(deployment: str) -> None:
    docs = manifests()
    env = _env(docs, deployment)
    files = _mounted_files(docs, deployment)
    theirs = {name for d, (name, _) in BUS_SECRETS.items() if d != deployment}
    pod = named(docs, "Deployment")[deployment]["spec"]["template"]["spec"]
    for other in theirs:
        assert other not in repr(pod), f"{deployment} can read {other}"
    assert not any(
        k.startswith(("ALC_BUS_", "ALC_KEY_ISSUER")) and "valueFrom" in e for k, e in env.items()
    ), "a bus secret in an env value, not a file"
    if deployment not in BUS_SECRETS:
        assert not any(k.startswith(("ALC_BUS_", "ALC_KEY_ISSUER")) for k in env)
        return
    secret, keys = BUS_SECRETS[deployment]
    for key, setting in keys.items():
        assert files[env[setting]["value"]] == (secret, key)


def test_no_manifest_commits_a_bus_secret() -> None:
    # Created by deploy/k8s/bus-secrets.sh (README.md), so that `kubectl apply -k` never
    # resets one, and with no secret on a command line.
    committed = named(manifests(), "Secret")
    script = (K8S / "bus-secrets.sh").read_text("utf-8")
    readme = (K8S / "README.md").read_text("utf-8")
    assert "bash deploy/k8s/bus-secrets.sh" in readme
    for secret, keys in BUS_SECRETS.values():
        assert secret not in committed
        assert f"create secret generic {secret}" in script
        assert all(f"--from-file={k}=" in script for k in keys)
    assert "--from-literal" not in script


def test_the_lag_scaler_logs_in_as_compaction() -> None:
    docs = manifests()
    auths = named(docs, "TriggerAuthentication")
    for trigger in named(docs, "ScaledObject")["agentloom-compaction"]["spec"]["triggers"]:
        meta = trigger["metadata"]
        assert (meta["sasl"], meta["tls"]) == ("scram_sha512", "enable")
        auth = auths[trigger["authenticationRef"]["name"]]["spec"]
        refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["secretTargetRef"]}
        assert refs == {"password": ("compaction", "password"), "ca": (CA_SECRET, "ca.crt")}
        (user,) = auth["env"]
        assert user["parameter"] == "username"
        assert _env(docs, "agentloom-compaction")[user["name"]]["value"] == "compaction"
