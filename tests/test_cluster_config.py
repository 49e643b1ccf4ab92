"""The deployable cluster, checked the way its tools check it (issue 10 item 3), without a cloud:

- cluster.yaml: what `ray up` does before it talks to the cloud — Ray 2.60's own `prepare_config` (defaults
  filled in, setup commands merged) and `validate_config` (its ray-schema.json) — plus what vidforge needs of
  it: a head with no CPUs, token auth on every node, S3 media, GPU and CPU worker types, and the head's secrets
  (the PostgreSQL state URL, the review key) read from a file into its environment, never written in a command;
- deploy/serve.yaml: Serve's own config schema (`ServeDeploySchema`, what `serve deploy` validates), with an
  import path that imports the real builder and args that the builder accepts (tests/test_cluster.py deploys
  it on a live cluster);
- deploy/rayservice.yaml: parsed, with the fields KubeRay needs, and the head's secrets from a Kubernetes Secret
  (secretKeyRef) rather than serveConfigV2. KubeRay's CRD schema is not available offline here (it ships with the
  operator, not with any Python package), so it is not validated against it.

Every VIDFORGE_* variable the files set must be one that serve_app._config reads.
"""

from __future__ import annotations

import importlib
import re
import shlex
import tomllib

import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.serve.schema import ServeDeploySchema

from serve_app._config import Config
from serve_app.launch._ray_env import RAY_ENV_DEFAULTS, apply_ray_env_defaults
from serve_app.launch.deployment import APP_NAME, AppArgs, app
from tests.harness import REPO

# The variables vidforge reads: each Config field's (pydantic-settings: VIDFORGE_<FIELD>, or its alias).
SETTINGS = {
    field.validation_alias if isinstance(field.validation_alias, str) else f"VIDFORGE_{name.upper()}"
    for name, field in Config.model_fields.items()
}
# What a head keeps secret: the database URL holds a password, the review key decides approvals. Neither belongs in a
# file that is committed, a command line (`ps` shows it) or Serve's runtime_env (stored and shown in plain text).
HEAD_SECRETS = {"VIDFORGE_STATE_URL", "VIDFORGE_REVIEW_KEY"}
HEAD_ENV_FILE = "~/vidforge-head.env"  # cluster.yaml: the head's secrets, as VAR=value lines


def load(path: str):
    return yaml.safe_load((REPO / path).read_text())


def env_assignments(command: str) -> dict[str, str]:
    """The NAME=value words a shell command line sets, wherever they stand in it."""
    return dict(word.split("=", 1) for word in shlex.split(command) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word))


def test_ray_env_defaults_leave_an_operators_values():
    environ = {"RAY_event_stats": "1"}
    apply_ray_env_defaults(environ)
    assert environ == {**RAY_ENV_DEFAULTS, "RAY_event_stats": "1"}


def test_cluster_yaml_is_what_ray_up_accepts():
    config = prepare_config(load("cluster.yaml"))  # what `ray up` does first, then validates against the schema
    validate_config(config)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"] == {"CPU": 0} and head["max_workers"] == 0  # no segment work, ever
    assert types["gpu_worker"]["resources"]["GPU"] >= 1 and "GPU" not in types["cpu_worker"]["resources"]
    assert all(types[t]["node_config"].get("IamInstanceProfile") for t in ("gpu_worker", "cpu_worker"))
    # Elastic: no worker runs until the queue asks for one, and vidforge reads the config the autoscaler runs from.
    assert all(types[t]["min_workers"] == 0 for t in ("gpu_worker", "cpu_worker"))
    assert any("pip install" in cmd for cmd in config["head_setup_commands"])
    assert any("pip install" in cmd for cmd in config["worker_setup_commands"])

    # Token auth on every node: the token file goes everywhere, every `ray start` turns token mode on.
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    starts = [c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"] if " start " in c]
    assert len(starts) == 2 and all(env_assignments(c)["RAY_AUTH_MODE"] == "token" for c in starts)
    assert "--num-cpus=0" in shlex.split(next(c for c in starts if "--head" in c))

    serve = next(c for c in config["head_start_ray_commands"] if "vidforge serve" in c)
    env = env_assignments(serve)
    assert env["RAY_AUTH_MODE"] == "token" and env["VIDFORGE_STORAGE_URL"].startswith("s3://")
    assert {"VIDFORGE_STATE_DIR", "VIDFORGE_TOKENS_FILE"} <= set(env)
    assert env["VIDFORGE_AUTOSCALING_CONFIG"] == "~/ray_bootstrap_config.yaml"  # where `ray up` puts this config
    assert {name for name in env if name.startswith("VIDFORGE_")} <= SETTINGS
    assert "--ray-address auto" in serve and "--host 0.0.0.0" in serve
    # The head's secrets: from a file copied like the tokens file, read into the environment (`set -a` exports
    # what the file sets) before `vidforge serve` starts, and set in no command; the file's documented lines name
    # settings vidforge reads.
    assert config["file_mounts"][HEAD_ENV_FILE] == HEAD_ENV_FILE
    words = shlex.split(serve)
    sourced = words.index(HEAD_ENV_FILE)
    assert words[sourced - 4 : sourced] == ["set", "-a", "&&", "."] and words[sourced + 1 : sourced + 4] == [
        "&&",
        "set",
        "+a",
    ]
    assert sourced < words.index(".venv/bin/vidforge")
    assert not HEAD_SECRETS & {
        name for command in config["head_start_ray_commands"] for name in env_assignments(command)
    }
    documented = set(re.findall(r"^#\s+(VIDFORGE_\w+)=", (REPO / "cluster.yaml").read_text(), re.M))
    assert documented == HEAD_SECRETS <= SETTINGS
    # The bucket's region reaches every node's tasks (segment tasks read the bucket): every `ray start` has it.
    assert all(env_assignments(c)["AWS_REGION"] for c in starts)
    # Ray's own processes as `vidforge serve` starts them locally (serve_app.launch._ray_env), on every node.
    assert all(env_assignments(c).items() >= RAY_ENV_DEFAULTS.items() for c in starts)


def test_serve_config_is_what_serve_deploy_accepts():
    config = ServeDeploySchema.model_validate(load("deploy/serve.yaml"))
    [application] = config.applications
    assert application.name == APP_NAME and application.route_prefix is None
    module, attribute = application.import_path.split(":")
    assert getattr(importlib.import_module(module), attribute) is app
    # What an operator's config names stays public (no `_`-marked module: those may move without notice).
    assert not any(part.startswith("_") for part in module.split(".")), module
    args = AppArgs.model_validate(application.args)
    assert (args.host, args.port) == ("0.0.0.0", 8000)
    # The ingress replicas (on the head: serve_app.launch.deployment) answer HTTP themselves; Serve's proxy stays off.
    assert config.proxy_location.value == "Disabled"
    env = application.runtime_env["env_vars"]
    assert set(env) <= SETTINGS and env["VIDFORGE_STORAGE_URL"].startswith("s3://")
    assert all(env[name].startswith("/") for name in env if name.endswith(("_DIR", "_FILE")))


def test_rayservice_manifest_has_what_kuberay_needs():
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all((REPO / "deploy" / "rayservice.yaml").read_text())}
    service = docs["RayService"]
    assert service["apiVersion"] == "ray.io/v1" and service["metadata"]["name"]
    spec = service["spec"]

    serve_config = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"]))
    [application] = serve_config.applications
    [reference] = ServeDeploySchema.model_validate(load("deploy/serve.yaml")).applications
    assert (application.import_path, application.args) == (reference.import_path, reference.args)
    env = application.runtime_env["env_vars"]
    assert set(env) <= SETTINGS and env["VIDFORGE_STORAGE_URL"].startswith("s3://")

    cluster = spec["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__
    assert cluster["authOptions"] == {"mode": "token"}  # KubeRay hands RAY_AUTH_MODE and the token to every pod
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    groups = cluster["workerGroupSpecs"]
    assert len({g["groupName"] for g in groups}) == len(groups)
    for group in [head, *groups]:
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())  # KubeRay: map of strings
        assert group["template"]["spec"]["containers"][0]["image"]
    for group in groups:
        assert group["minReplicas"] == group["replicas"] == 0 < group["maxReplicas"]  # elastic: none until asked
    # The node types vidforge plans and asks for (VIDFORGE_AUTOSCALING_CONFIG, from the ConfigMap) are the groups'.
    mirrored = yaml.safe_load(docs["ConfigMap"]["data"]["cluster.yaml"])
    assert mirrored["max_workers"] == sum(g["maxReplicas"] for g in groups)
    for group in groups:
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        node_type = mirrored["available_node_types"][group["groupName"]]
        assert node_type["max_workers"] == group["maxReplicas"] and node_type["min_workers"] == group["minReplicas"]
        assert node_type["resources"].get("CPU") == int(limits["cpu"])
        assert node_type["resources"].get("GPU", 0) == int(limits.get("nvidia.com/gpu", 0))
    gpu = [
        g["template"]["spec"]["containers"][0]
        for g in groups
        if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]
    ]
    assert len(gpu) == 1 and len(groups) == 2  # a GPU worker group and a CPU one
    assert "video" in {e["name"]: e["value"] for e in gpu[0]["env"]}["NVIDIA_DRIVER_CAPABILITIES"]
    for group in [head, *groups]:  # Ray's own processes as `vidforge serve` starts them (serve_app.launch._ray_env)
        env_vars = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
        assert env_vars.items() >= RAY_ENV_DEFAULTS.items()

    # The head's secrets from a Kubernetes Secret into the head container's environment, which the Serve build task
    # and the registry it starts inherit: not in serveConfigV2, not on any worker, no value written here. Nothing
    # else of the state is on the head's disk (no volume claim): a lost head pod is replaced without loss.
    head_pod = head["template"]["spec"]
    head_env = {e["name"]: e for e in head_pod["containers"][0]["env"]}
    secret_refs = {name: head_env[name]["valueFrom"]["secretKeyRef"] for name in HEAD_SECRETS}
    assert HEAD_SECRETS <= SETTINGS and not HEAD_SECRETS & set(env)
    assert len({ref["name"] for ref in secret_refs.values()}) == 1 and all(ref["key"] for ref in secret_refs.values())
    assert not any("value" in head_env[name] for name in HEAD_SECRETS)
    for group in groups:
        assert not HEAD_SECRETS & {e["name"] for e in group["template"]["spec"]["containers"][0]["env"]}
    assert "PersistentVolumeClaim" not in docs and "VIDFORGE_STATE_DIR" not in env
    assert not [v for v in head_pod["volumes"] if "persistentVolumeClaim" in v]

    # The MCP tokens from their Secret, the autoscaling config from the ConfigMap: both where serveConfigV2 says.
    mounts = {m["name"]: m["mountPath"] for m in head_pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in head_pod["volumes"]}
    assert env["VIDFORGE_TOKENS_FILE"].startswith(mounts["tokens"]) and volumes["tokens"]["secret"]["secretName"]
    assert env["VIDFORGE_AUTOSCALING_CONFIG"].startswith(mounts["autoscaling"])
    assert volumes["autoscaling"]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    accounts = {g["template"]["spec"]["serviceAccountName"] for g in [head, *groups]}
    assert accounts == {docs["ServiceAccount"]["metadata"]["name"]}  # one identity that may use the bucket

    # Operating it (README "Operating vidforge"): Ray's metrics on every node's one port, vidforge's on the head's
    # VIDFORGE_METRICS_PORT; the head's probes on vidforge's own /readyz (unauthenticated) and /healthz (200, or 401
    # without a token: the process answers).
    for group in [head, *groups]:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"
    head_container = head_pod["containers"][0]
    assert {"containerPort": 8080, "name": "metrics"} in head_container["ports"]
    vidforge_metrics = int(env["VIDFORGE_METRICS_PORT"])
    assert {"containerPort": vidforge_metrics, "name": "vidforge-metrics"} in head_container["ports"]
    readiness = head_container["readinessProbe"]["exec"]["command"]  # ready before the app is up: KubeRay waits
    assert readiness[:2] == ["python", "-c"] and "'/readyz'" in readiness[2] and "8000" in readiness[2]
    assert application.args["port"] == 8000
    compile(readiness[2], "readinessProbe", "exec")
    liveness = head_container["livenessProbe"]["exec"]["command"]
    assert liveness[:2] == ["python", "-c"] and "'/healthz'" in liveness[2] and "(200, 401)" in liveness[2]
    compile(liveness[2], "livenessProbe", "exec")  # the one-liner is Python

    # The MCP endpoint: a Service onto the head pod's port where the ingress replicas listen (no Serve proxy).
    assert serve_config.proxy_location.value == "Disabled"
    endpoint = docs["Service"]["spec"]
    assert endpoint["selector"].items() <= head["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in endpoint["ports"]] == [application.args["port"]]


def test_dockerfile_installs_every_package():
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = [pattern.removesuffix("*") for pattern in found["include"]]  # each with its sub-packages
    copied = re.findall(r"^COPY --chown=\S+ (\S+) \1$", (REPO / "deploy" / "Dockerfile").read_text(), re.M)
    assert sorted(copied) == sorted(packages)


def test_rayservice_metrics_ports_are_closed_to_all_but_prometheus():
    """Issue 32: both metrics ports (Ray's on every pod, vidforge's on the head) listen on every interface of their
    pod without authentication; the manifest's NetworkPolicy must select every pod of the cluster and let only
    Prometheus reach them, while the pods reach one another and anyone reaches the MCP port."""
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all((REPO / "deploy" / "rayservice.yaml").read_text())}
    spec = docs["RayService"]["spec"]
    cluster = spec["rayClusterConfig"]
    [application] = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"])).applications
    metrics_ports = {int(application.runtime_env["env_vars"]["VIDFORGE_METRICS_PORT"])}
    metrics_ports |= {int(g["rayStartParams"]["metrics-export-port"]) for g in [cluster["headGroupSpec"]]}
    metrics_ports |= {int(g["rayStartParams"]["metrics-export-port"]) for g in cluster["workerGroupSpecs"]}
    assert len(metrics_ports) == 2

    policy = docs["NetworkPolicy"]
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["spec"]["policyTypes"] == ["Ingress"]
    selected = policy["spec"]["podSelector"]["matchLabels"].items()
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        assert selected <= group["template"]["metadata"]["labels"].items(), group.get("groupName", "head")

    rules = policy["spec"]["ingress"]
    own = [rule for rule in rules if rule.get("from") == [{"podSelector": {"matchLabels": dict(selected)}}]]
    assert len(own) == 1 and "ports" not in own[0]  # Ray's processes talk on many ports among the cluster's pods
    for rule in rules:
        ports = ports_of(rule)
        if "from" not in rule:  # anyone: the MCP port, and nothing else
            assert ports == {application.args["port"]}, rule
        elif ports & metrics_ports and rule not in own:
            (peer,) = rule["from"]
            assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "prometheus", rule
            assert peer["namespaceSelector"]["matchLabels"], rule  # one namespace's Prometheus, not any pod's
            assert ports == metrics_ports, rule
    assert any(ports_of(rule) == metrics_ports for rule in rules), "no rule lets Prometheus scrape"


def ports_of(rule: dict) -> set[int]:
    return {entry["port"] for entry in rule.get("ports", [])}
