"""A response cache answers only for the model and run it was written for.

Two Evaluations writing to one `output.path` at generation 1 with different models, and one
Evaluation deleted and made again under its name with another model (what a GitOps
replace does): each run gets its own cache on the shared volume, and each model's scores
equal a local `assay run` of that model, not the answers the other model left there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest, give_to_runner
from tests.e2e.helpers import MODEL_IN_POD, condensed, hf_spec, local_assay_run

pytestmark = pytest.mark.e2e

OTHER_MODEL_IN_POD = "/cache/models/tiny-gpt2-other"
FROM_CACHE = re.compile(r"(\d+) of (\d+) requests answered from the response cache")


@pytest.fixture(scope="module")
def other_model(shared_data: Path, volumes: Path, tiny_model: Path) -> Path:
    """A second tiny GPT-2 on the cache volume: the same architecture, other weights (another seed)."""
    from tests.model_fixtures import tiny_gpt2

    model = tiny_gpt2(
        volumes / "cache" / "models" / Path(OTHER_MODEL_IN_POD).name, shared_data / "gpt2_tokenizer", seed=4321
    )
    give_to_runner(model)
    return model


@pytest.fixture(scope="module")
def other_results(other_model: Path, datasets_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference scores of the second model: a local `assay run` without any cache."""
    return local_assay_run(other_model, tmp_path_factory.mktemp("local-other"), datasets_dir=datasets_dir)


def _scores(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {k: evaluation["status"].get(k) for k in ("results", "nSamples", "versions")}


def _cache_hits(cluster: Cluster, name: str) -> list[int]:
    """Requests the run's pod answered from its response cache, per model call."""
    (pod,) = cluster.items("pods", f"assay.dev/job={cluster.job_name(name)}")
    log = cluster.kubectl("logs", pod["metadata"]["name"]).stdout
    found = [int(done) for done, _ in FROM_CACHE.findall(log)]
    assert found, f"the runner did not report its cache use:\n{log[-3000:]}"
    return found


def _caches(cluster: Cluster, path: str) -> set[str]:
    """The run directories under `.assay-cache` of one output path (host side of the output claim)."""
    root = cluster.output_dir / path / ".assay-cache"
    return {entry.name for entry in root.iterdir()} if root.is_dir() else set()


def test_two_evaluations_on_one_output_path_score_their_own_models(
    cluster: Cluster, local_results: dict[str, Any], other_results: dict[str, Any]
) -> None:
    expected_a, expected_b = condensed(local_results), condensed(other_results)
    assert expected_a["results"] != expected_b["results"], "the two models must score differently for this test"
    shared = {"output": {"pvc": "output", "path": "shared"}}
    cluster.apply(evaluation_manifest("model-a", **hf_spec(MODEL_IN_POD, **shared)))
    a = cluster.wait("model-a", "Succeeded", timeout=300)
    # model-a's answers are all on the volume now; model-b's run starts at generation 1 too
    cluster.apply(evaluation_manifest("model-b", **hf_spec(OTHER_MODEL_IN_POD, **shared)))
    b = cluster.wait("model-b", "Succeeded", timeout=300)

    assert a["metadata"]["generation"] == b["metadata"]["generation"] == 1
    assert _scores(a) == expected_a
    assert _scores(b) == expected_b
    assert set(_cache_hits(cluster, "model-b")) == {0}, "model-b was answered from model-a's cache"
    runs = _caches(cluster, "shared")
    assert len(runs) == 2 and {r.rsplit("-", 1)[0] for r in runs} == {a["metadata"]["uid"], b["metadata"]["uid"]}


def test_an_evaluation_made_again_with_another_model_scores_the_new_model(
    cluster: Cluster, local_results: dict[str, Any], other_results: dict[str, Any]
) -> None:
    output = {"output": {"pvc": "output", "path": "replaced"}}
    cluster.apply(evaluation_manifest("tenant", **hf_spec(MODEL_IN_POD, **output)))
    first = cluster.wait("tenant", "Succeeded", timeout=300)
    assert _scores(first) == condensed(local_results)

    # A GitOps replace: delete, wait until its Job is collected, create under the same name.
    cluster.kubectl("delete", "evaluation", "tenant", "--timeout=60s")
    cluster.wait_for(
        "the first run's Job and pods to be collected",
        lambda: not cluster.items("jobs") and not cluster.items("pods"),
        timeout=120,
    )
    cluster.apply(evaluation_manifest("tenant", **hf_spec(OTHER_MODEL_IN_POD, **output)))
    second = cluster.wait("tenant", "Succeeded", timeout=300)

    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["metadata"]["generation"] == 1
    assert _scores(second) == condensed(other_results)
    assert set(_cache_hits(cluster, "tenant")) == {0}, "the new model was answered from the old one's cache"
    assert len(_caches(cluster, "replaced")) == 2
