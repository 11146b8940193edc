"""The order and chunks of a sequential run: seeded, the same when drawn again, every document once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from assay.runner.sequential import order as chunk_order

REPO = Path(__file__).resolve().parents[2]


def test_the_order_is_a_permutation_drawn_again_alike() -> None:
    order = chunk_order.document_order(1000, seed=0, task="mmlu_anatomy")
    assert sorted(order) == list(range(1000))
    assert order != list(range(1000)), "shuffled, not the file's order"
    assert chunk_order.document_order(1000, seed=0, task="mmlu_anatomy") == order, "a rerun resumes the same order"


def test_the_seed_and_the_task_each_change_the_order() -> None:
    base = chunk_order.document_order(500, seed=0, task="arc_easy")
    assert chunk_order.document_order(500, seed=1, task="arc_easy") != base
    assert chunk_order.document_order(500, seed=0, task="arc_challenge") != base


@pytest.mark.parametrize("hash_seed", ["1", "2"])
def test_the_order_does_not_depend_on_pythons_hash_seed(hash_seed: str) -> None:
    """Each rank is its own interpreter, with its own string-hash salt: the draw must not use it."""
    code = "from assay.runner.sequential import order as chunk_order; print(chunk_order.document_order(50, seed=0, task='t'))"
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(chunk_order.document_order(50, seed=0, task="t"))


@pytest.mark.parametrize("documents,size", [(1, 64), (64, 64), (1280, 64), (1281, 65), (14042, 703)])
def test_the_default_chunk_is_the_larger_of_64_and_a_twentieth(documents: int, size: int) -> None:
    assert chunk_order.default_chunk_size(documents) == size


def test_chunks_cover_the_order_once_in_order() -> None:
    order = chunk_order.document_order(150, seed=5, task="t")
    pieces = chunk_order.chunks(order, 64)
    assert [len(piece) for piece in pieces] == [64, 64, 22]
    assert [index for piece in pieces for index in piece] == order
    with pytest.raises(ValueError):
        chunk_order.chunks(order, 0)
