"""examples/suite (and its Kueue variant) rendered by a real `kubectl kustomize`: a complete
model × task matrix, one suite label, the suite's task ConfigMap referenced under its hashed
name and accepted by the operator's checks; a duplicate Evaluation fails at render time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.operator.admission import validation
from assay.operator.build import baseline_view, builders
from assay.spec import ENV_BASELINE_EVALUATION, parse_spec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
KUBECTL = shutil.which("kubectl")
if KUBECTL is None and os.environ.get("CI", "").lower() == "true":
    raise RuntimeError("kubectl is not on PATH: CI renders examples/suite with `kubectl kustomize`")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not on PATH")


def _kustomize(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, check=False)


def _render(path: Path) -> list[dict[str, Any]]:
    result = _kustomize(path)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@needs_kubectl
def test_the_suite_is_a_model_by_task_matrix_with_its_own_tasks() -> None:
    documents = _render(EXAMPLES / "suite")
    evaluations = [d for d in documents if d["kind"] == "Evaluation"]
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    assert all(d["metadata"]["labels"]["assay.dev/suite"] == "reasoning-v1" for d in documents)
    pairs = {(e["spec"]["modelArgs"]["pretrained"], tuple(e["spec"]["tasks"])) for e in evaluations}
    models, tasks = {m for m, _ in pairs}, {t for _, t in pairs}
    assert len(evaluations) == len(pairs) == len(models) * len(tasks) == 4
    # The generated name (content hash) replaces the one the Evaluations wrote.
    name = config_map["metadata"]["name"]
    assert name.startswith("suite-tasks-") and name != "suite-tasks"
    for evaluation in evaluations:
        assert evaluation["spec"]["taskSources"] == [{"configMap": name}]
        statuses = validation.validate_with_sources(
            parse_spec(evaluation["spec"]), namespace="suite", get={name: config_map}.get
        )
        assert statuses[0]["tasks"] == ["arc_easy_qa", "suite_qa"]


@needs_kubectl
def test_editing_a_suite_task_renames_its_config_map(tmp_path: Path) -> None:
    copy = tmp_path / "suite"
    shutil.copytree(EXAMPLES / "suite", copy)
    before = next(d for d in _render(copy) if d["kind"] == "ConfigMap")["metadata"]["name"]
    task = copy / "tasks" / "arc_easy_qa.yaml"
    task.write_text(task.read_text().replace("Q: ", "Question: "))
    after = _render(copy)
    renamed = next(d for d in after if d["kind"] == "ConfigMap")["metadata"]["name"]
    assert renamed != before  # a new spec.taskSources: a new generation, so a new run
    assert all(e["spec"]["taskSources"] == [{"configMap": renamed}] for e in after if e["kind"] == "Evaluation")


@needs_kubectl
def test_the_kueue_variant_queues_every_runner_job() -> None:
    evaluations = [d for d in _render(EXAMPLES / "suite-kueue") if d["kind"] == "Evaluation"]
    assert len(evaluations) == 4
    for evaluation in evaluations:
        spec = parse_spec(evaluation["spec"])
        ref = builders.EvaluationRef(name=evaluation["metadata"]["name"], namespace="suite", uid="u", generation=1)
        job = builders.job(ref, spec)
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "evaluations"


@needs_kubectl
def test_a_duplicate_evaluation_fails_at_kustomize_not_in_the_cluster(tmp_path: Path) -> None:
    copy = tmp_path / "suite"
    shutil.copytree(EXAMPLES / "suite", copy)
    evaluations = copy / "evaluations.yaml"
    first = evaluations.read_text().split("---\n")[0]
    evaluations.write_text(evaluations.read_text() + "---\n" + first)
    result = _kustomize(copy)
    assert result.returncode != 0
    assert "pythia-160m-arc-easy-qa" in result.stderr and "already registered id" in result.stderr, result.stderr


@needs_kubectl
def test_the_gated_suite_compares_each_candidate_with_its_production_twin() -> None:
    from assay.operator.build import children

    evaluations = {d["metadata"]["name"]: d for d in _render(EXAMPLES / "suite-gated") if d["kind"] == "Evaluation"}
    candidates = {
        name: e for name, e in evaluations.items() if e["metadata"]["labels"]["assay.dev/role"] == "candidate"
    }
    assert len(candidates) == 2 and len(evaluations) == 4
    for name, evaluation in candidates.items():
        spec = parse_spec(evaluation["spec"])
        assert spec.baseline is not None and spec.baseline.evaluation is not None
        baseline = parse_spec(evaluations[spec.baseline.evaluation]["spec"])
        # The same tasks and output volume (where the runner reads the baseline's scores), another revision.
        assert baseline.tasks == spec.tasks and baseline.output.pvc == spec.output.pvc
        assert baseline.model_args["revision"] != spec.model_args["revision"]
        assert baseline.baseline is None
        validation.validate(spec)
        ref = builders.EvaluationRef(name=name, namespace="team-a", uid="u", generation=1)
        # The runner reads no Evaluation: its Job carries what the operator read of the baseline.
        shown = baseline_view.view(evaluations[spec.baseline.evaluation])
        (job,) = [c for c in children.children(ref, spec, baseline=shown) if c["kind"] == "Job"]
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert json.loads(env[ENV_BASELINE_EVALUATION])["metadata"] == {"name": spec.baseline.evaluation}
