"""The operator's settings: read from its environment once (`assay.operator.settings`), passed in.

build/ and admission/ are pure: what they make depends on their arguments alone, so they
read no environment; the rest of the operator reads it only where it starts (`main`) or
hands it on whole to a child process (`local`), and the Kubernetes client where it finds
its credentials, as every Kubernetes client does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from assay.errors import UserError
from assay.operator import main, settings
from assay.operator.build import builders, runner_settings
from assay.operator.build import children as run_children
from assay.spec import parse_spec
from tests.operator.helm_chart import needs_helm, operator_container, render_values

OPERATOR = Path(settings.__file__).resolve().parent
READS_ALLOWED = {"main.py", "local.py", "kube/credentials.py"}
"""The entry point (its one `settings.from_env(os.environ)`), `assay apply --local`'s child
process environment, and the client's credentials ($KUBECONFIG, the in-cluster service)."""


def _environment_reads(path: Path) -> list[int]:
    """Lines of `path` that touch the process environment: os.environ, os.getenv, os.putenv, or those names imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in names for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_finds_an_environment_read(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom os import getenv\nX = os.environ.get('A')\nY = os.getenv('B')\n")
    assert _environment_reads(module) == [2, 3, 4]


@pytest.mark.parametrize("role", ["build", "admission"])
def test_the_pure_roles_read_no_environment(role: str) -> None:
    found = {str(p.relative_to(OPERATOR)): _environment_reads(p) for p in sorted((OPERATOR / role).rglob("*.py"))}
    assert found and {name: lines for name, lines in found.items() if lines} == {}


def test_only_the_entry_point_reads_the_operators_settings_from_the_environment() -> None:
    reading = {str(p.relative_to(OPERATOR)) for p in OPERATOR.rglob("*.py") if _environment_reads(p)}
    assert reading <= READS_ALLOWED, (
        f"read it in assay/operator/settings.py's from_env instead: {reading - READS_ALLOWED}"
    )


CHART_ENV = {
    "ASSAY_POLICY": '{"allowTaskCode": true, "maxGpusPerEvaluation": 4}',
    "ASSAY_RUNNER_IMAGE": "registry.local/runner:2",
    "ASSAY_RUNNER_VLLM_IMAGE": "registry.local/runner-vllm:2",
    "ASSAY_GPU_RESOURCE": "amd.com/gpu",
    "ASSAY_RUNNER_DEFAULT_MEMORY": "24Gi",
    "ASSAY_RUNNER_IMAGE_PULL_SECRETS": "reg, mirror",
    "ASSAY_RUNNER_EGRESS": '[{"ports": [{"port": 443}]}]',
    "ASSAY_NAMESPACES": "team-a,team-b",
    "ASSAY_IMAGE_PULL_TIMEOUT": "120",
    "ASSAY_SCORE_SERIES": "headline",
    "ASSAY_MAX_SERIES_PER_EVALUATION": "50",
    "ASSAY_API_QPS": "20",
    "ASSAY_API_BURST": "40",
    "ASSAY_METRICS_PORT": "9443",
    "ASSAY_METRICS_SECURE": "true",
    "ASSAY_METRICS_CERT_DIR": "/etc/assay/metrics-tls",
    "ASSAY_HEALTH_PORT": "8081",
    "POD_NAMESPACE": "assay-system",
    "POD_NAME": "assay-operator-0",
}


def test_every_setting_of_the_chart_lands_in_the_record() -> None:
    read = settings.from_env(CHART_ENV)
    assert read.runner == runner_settings.RunnerSettings(
        default_image="registry.local/runner:2",
        vllm_image="registry.local/runner-vllm:2",
        gpu_resource="amd.com/gpu",
        default_memory="24Gi",
        pull_secrets=("reg", "mirror"),
        egress=({"ports": [{"port": 443}]},),
        policy=read.policy,
    )
    assert read.policy.allow_task_code and read.policy.max_gpus == 4
    assert read.namespaces == ("team-a", "team-b") and read.image_pull_timeout == 120.0
    assert (read.score_series, read.max_series_per_evaluation) == ("headline", 50)
    assert (read.api_qps, read.api_burst) == (20.0, 40)
    assert (read.metrics_port, read.metrics_secure, read.metrics_cert_dir, read.health_port) == (
        9443,
        True,
        "/etc/assay/metrics-tls",
        8081,
    )
    assert (read.pod_namespace, read.pod_name) == ("assay-system", "assay-operator-0")
    assert settings.from_env({}) == settings.OperatorSettings()


def test_a_job_built_twice_from_the_same_settings_is_the_same_whatever_the_environment_says_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = parse_spec({"model": "dummy", "tasks": ["arc_easy"], "resources": {"gpusPerNode": 1}})
    ref = builders.EvaluationRef(name="ev", namespace="team-a", uid="u1", generation=1)
    runner = settings.from_env(CHART_ENV).runner
    first = run_children.children(ref, spec, runner=runner)
    monkeypatch.setenv("ASSAY_GPU_RESOURCE", "nvidia.com/gpu")
    monkeypatch.setenv("ASSAY_RUNNER_IMAGE_PULL_SECRETS", "")
    assert run_children.children(ref, spec, runner=runner) == first
    job = next(c for c in first if c["kind"] == "Job")["spec"]["template"]["spec"]
    assert job["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "1", "memory": "24Gi"}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ASSAY_METRICS_PORT", "nine"),
        ("ASSAY_HEALTH_PORT", "x"),
        ("ASSAY_METRICS_SECURE", "perhaps"),
        ("ASSAY_API_QPS", "fast"),
        ("ASSAY_MAX_SERIES_PER_EVALUATION", "many"),
        ("ASSAY_RUNNER_DEFAULT_MEMORY", "lots"),
        ("ASSAY_IMAGE_PULL_TIMEOUT", "soon"),
    ],
)
def test_a_bad_setting_is_one_sentence_naming_it(name: str, value: str) -> None:
    with pytest.raises(UserError, match=name):
        settings.from_env({name: value})


@needs_helm
def test_the_charts_environment_for_the_operator_reads_as_settings() -> None:
    """Every variable the chart gives the operator's container, with its defaults and with values set."""
    for values in ((), ("runner.gpuResourceName=amd.com/gpu", "runner.imagePullSecrets={reg}", "operator.apiQPS=12.5")):
        container = operator_container(render_values(*values))
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        read = settings.from_env(env)
        args = main.parse_args(container["args"][1:], read)  # `assay operator ARGS`
        assert args.metrics_secure and args.metrics_port == 9090 and args.all_namespaces
        assert read.api_qps == (12.5 if values else 100.0) and read.runner.egress is not None
        assert read.runner.gpu_resource == ("amd.com/gpu" if values else "nvidia.com/gpu")
        assert read.runner.pull_secrets == (("reg",) if values else ())
