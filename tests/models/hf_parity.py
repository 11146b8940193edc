"""The HF backend against lm-eval's: both models on the same small local checkpoints, and
their log-likelihoods and generations compared (shared by the hf backend's parity tests).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest

from assay.runner.models.hf.model import HFLM
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest


def lm_eval_hf() -> Any:
    """lm-eval's HF module; only tests that compare with lm-eval call this (and skip without it)."""
    return pytest.importorskip("lm_eval.models.huggingface")


def Instance(*args: Any) -> Any:
    return pytest.importorskip("lm_eval.api.instance").Instance(*args)


TOL = 1e-5


@pytest.fixture(scope="session")
def model_dirs(gpt2_dir: Path, llama_dir: Path, t5_dir: Path) -> dict[str, Path]:
    """The three local checkpoints by family (the session fixtures of tests/model_fixtures.py)."""
    return {"gpt2": gpt2_dir, "llama": llama_dir, "t5": t5_dir}


_CACHE: dict[tuple[str, str, tuple[tuple[str, Any], ...]], Any] = {}


def _quiet() -> None:
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    logging.getLogger("transformers").setLevel(logging.ERROR)


def pair(model_dirs: dict[str, Path], kind: str, **args: Any) -> tuple[HFLM, Any]:
    """(Assay's HFLM, lm-eval's HFLM) on the same directory with the same model_args."""
    _quiet()
    args = {"device": "cpu", "max_batch_size": 8, **args}
    key = (kind, "", tuple(sorted((k, repr(v)) for k, v in args.items())))
    if key not in _CACHE:
        ours = HFLM(pretrained=str(model_dirs[kind]), **args)
        theirs = lm_eval_hf().HFLM(pretrained=str(model_dirs[kind]), **args)
        _CACHE[key] = (ours, theirs)
    return _CACHE[key]


def ll_both(ours: HFLM, theirs: Any, reqs: list[tuple[str, str]]) -> tuple[list[Any], list[Any]]:
    mine = ours.loglikelihood([LoglikelihoodRequest(c, x) for c, x in reqs], disable_tqdm=True)
    ref = theirs.loglikelihood([Instance("loglikelihood", {}, r, i) for i, r in enumerate(reqs)], disable_tqdm=True)
    return mine, ref


def assert_ll_equal(mine: list[Any], ref: list[Any]) -> None:
    assert len(mine) == len(ref)
    for index, (m, r) in enumerate(zip(mine, ref, strict=False)):
        assert math.isclose(m.logprob, r[0], abs_tol=TOL, rel_tol=0), (index, m, r)
        assert m.is_greedy == r[1], (index, m, r)


def gen_both(ours: HFLM, theirs: Any, reqs: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    mine = ours.generate_until([GenerationRequest(c, dict(k)) for c, k in reqs], disable_tqdm=True)
    ref = theirs.generate_until(
        [Instance("generate_until", {}, (c, dict(k)), i) for i, (c, k) in enumerate(reqs)], disable_tqdm=True
    )
    return mine, ref
