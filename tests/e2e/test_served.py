"""An Evaluation of a model already served: a real vLLM server (CPU build) outside the
cluster, reached by the runner pod at the bridge's gateway, gives the scores of a local
`local-completions` run against the same server, and the runner asks for no GPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.network import GATEWAY
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import HF_TASKS, LIMIT, MODEL_IN_POD, SEED, VOLUMES
from tests.model_fixtures import N_POSITIONS

pytestmark = pytest.mark.e2e


@pytest.fixture
def served(cluster: Cluster, tiny_model: Path, tmp_path: Path) -> Iterator[Any]:
    """vLLM serving the tiny GPT-2 on the gateway address, where pods (and this host) reach it."""
    from tests.served.vllm_server import VLLMServer

    server = VLLMServer(tiny_model, tmp_path / "vllm.log", max_model_len=N_POSITIONS, host=GATEWAY)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_served_model_is_evaluated_from_its_endpoint_with_a_local_runs_scores(
    cluster: Cluster,
    served: Any,
    tiny_model: Path,
    datasets_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from assay.runner.evaluator import simple_evaluate

    route = f"{served.base}/v1/completions"
    spec = {
        "model": "local-completions",
        "modelArgs": {"max_length": N_POSITIONS, "max_retries": 2},
        # The server knows the model by the path it was started with; the runner tokenizes
        # with the same checkpoint from its cache volume.
        "endpoint": {"url": route, "servedModel": str(tiny_model), "tokenizer": MODEL_IN_POD},
        "tasks": list(HF_TASKS),
        "limit": LIMIT,
        "seed": SEED,
        "resources": {"nodes": 1, "gpusPerNode": 0},
        **VOLUMES,
        "backoffLimit": 0,
    }
    cluster.apply(evaluation_manifest("served", **spec))
    status = cluster.wait("served", "Succeeded", timeout=300)["status"]

    (pod,) = cluster.items("pods")
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    assert not [name for name in limits if name.endswith("/gpu")], limits

    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(datasets_dir))  # the local run reads the same offline data
    local = simple_evaluate(
        "local-completions",
        tasks=list(HF_TASKS),
        limit=LIMIT,
        random_seed=SEED,
        numpy_random_seed=SEED,
        torch_random_seed=SEED,
        fewshot_random_seed=SEED,
        model_args=f"model={tiny_model},base_url={route},tokenizer={tiny_model},tokenizer_backend=huggingface,"
        f"max_length={N_POSITIONS},max_retries=2",
    )
    for task in HF_TASKS:
        for key, entry in status["results"][task].items():
            assert entry["value"] == pytest.approx(local["results"][task][key], rel=1e-9, abs=1e-12), (task, key)
