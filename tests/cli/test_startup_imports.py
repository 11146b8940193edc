"""`assay run` imports only what the run uses: a run on local data whose tasks name no metric
library loads no `datasets` (nor pandas, pyarrow), no metric library, no W&B, no Kubernetes
client. Each run is a fresh interpreter, so nothing a test imported earlier hides an import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model_fixtures import gpt2_dir  # noqa: F401  (session fixture)

REPO = Path(__file__).resolve().parents[2]
# None of these is needed by a run of arc_easy / lambada_openai / gsm8k on ASSAY_DATASETS_DIR.
UNUSED = (
    "datasets",
    "pandas",
    "pyarrow",
    "sacrebleu",
    "sklearn",
    "evaluate",
    "nltk",
    "rouge_score",
    "wandb",
    "kubernetes",
    "kopf",
)
_RUN_THEN_LIST_MODULES = """
import json, sys
from assay.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules_after_run(argv: list[str], datasets_dir: Path) -> set[str]:
    env = {
        **os.environ,
        "ASSAY_DATASETS_DIR": str(datasets_dir),
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUN_THEN_LIST_MODULES, *argv], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] in (0, None), done.stderr[-3000:]
    return set(report["modules"])


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_a_local_data_run_imports_no_datasets_metric_library_or_cluster_client(converted: Path) -> None:
    modules = _modules_after_run(
        ["run", "--model", "dummy", "--tasks", "arc_easy,lambada_openai,gsm8k", "--limit", "2"], converted
    )
    assert "assay.runner.tasks.documents" in modules  # the documents were read
    assert _loaded(modules, UNUSED) == []


@pytest.mark.model
def test_an_hf_run_on_local_data_imports_its_model_module_and_nothing_it_does_not_use(
    converted: Path,
    gpt2_dir: Path,
) -> None:
    modules = _modules_after_run(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={gpt2_dir}",
            "--tasks",
            "arc_easy",
            "--limit",
            "1",
            "--device",
            "cpu",
        ],
        converted,
    )
    assert "transformers.models.gpt2.modeling_gpt2" in modules
    assert _loaded(modules, UNUSED) == []
