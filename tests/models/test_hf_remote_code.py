"""The hf backend runs a model repository's code only for a real yes, on a real model load.

The tiny GPT-2 here carries an `auto_map` to a modeling file of its own that leaves a mark
when imported: transformers imports it only with trust_remote_code true. Text that is not
one of the accepted spellings (`on`, `y`, `enabled`) is refused before anything is loaded;
`no` loads the model with transformers' own GPT-2 class and leaves no mark.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from assay.errors import UserError
from assay.runner.models.hf.model import HFLM
from model_fixtures import gpt2_dir  # noqa: F401  (session fixture)

MODELING = """
from pathlib import Path

from transformers import GPT2LMHeadModel

Path({marker!r}).write_text("the repository's code ran")


class MarkedGPT2(GPT2LMHeadModel):
    pass
"""


@pytest.fixture
def remote_code_model(tmp_path: Path, gpt2_dir: Path) -> tuple[Path, Path]:
    """(model directory with its own modeling code, the file that code writes when it runs)."""
    model = tmp_path / "model-with-code"
    shutil.copytree(gpt2_dir, model)
    marker = tmp_path / "remote-code-ran"
    (model / "marked_modeling.py").write_text(MODELING.format(marker=str(marker)))
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "marked_modeling.MarkedGPT2"}
    (model / "config.json").write_text(json.dumps(config))
    return model, marker


@pytest.mark.parametrize("value", ["on", "y", "enabled", "On"])
def test_words_that_are_not_booleans_are_refused_before_the_load(
    remote_code_model: tuple[Path, Path], value: str
) -> None:
    model, marker = remote_code_model
    with pytest.raises(UserError) as caught:
        HFLM(pretrained=str(model), device="cpu", trust_remote_code=value)
    assert str(caught.value).startswith("model_args trust_remote_code must be true or false")
    assert not marker.exists()


@pytest.mark.parametrize("value", ["no", "false", "0", 0])
def test_no_loads_the_model_without_its_code(remote_code_model: tuple[Path, Path], value: Any) -> None:
    model, marker = remote_code_model
    lm = HFLM(pretrained=str(model), device="cpu", trust_remote_code=value)
    try:
        assert type(lm.model).__name__ == "GPT2LMHeadModel"
    finally:
        lm.close()
    assert not marker.exists()


def test_yes_runs_the_repository_s_code(remote_code_model: tuple[Path, Path]) -> None:
    """The control: the mark is what the repository's code leaves, so its absence above means something."""
    model, marker = remote_code_model
    lm = HFLM(pretrained=str(model), device="cpu", trust_remote_code="yes")
    try:
        assert type(lm.model).__name__ == "MarkedGPT2"
    finally:
        lm.close()
    assert marker.read_text() == "the repository's code ran"
