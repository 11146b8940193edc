"""The order and chunks of a sequential run: seeded, the same when drawn again, every document once."""

from __future__ import annotations

import itertools
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
def test_the_largest_default_chunk_is_the_larger_of_64_and_a_twentieth(documents: int, size: int) -> None:
    assert chunk_order.default_chunk_size(documents) == size


def test_the_default_looks_are_every_twentieth_and_64_doubling_where_not_near_one() -> None:
    ends = list(itertools.accumulate(chunk_order.chunk_sizes(14042)))
    grid = [703 * k for k in range(1, 20)] + [14042]
    assert set(grid) <= set(ends), "never later than looking after every twentieth"
    assert sorted(set(ends) - set(grid)) == [64, 128, 256, 512, 1024, 4096, 8192]  # 2048 is 61 from 2109
    assert list(itertools.accumulate(chunk_order.chunk_sizes(5000)))[:4] == [64, 128, 250, 500]
    assert chunk_order.chunk_sizes(320) == [64] * 5, "a small task: chunks of 64, as always"
    assert chunk_order.chunk_sizes(2000) == [100] * 20, "no doubling look within 64 documents of the grid's"
    assert chunk_order.chunk_sizes(30) == [30]
    assert chunk_order.chunk_sizes(0) == []


@pytest.mark.parametrize("documents", [1, 64, 65, 1000, 1281, 5000, 14042])
def test_the_chunk_sizes_cover_the_task_once(documents: int) -> None:
    for fixed in (None, 1, 100):
        sizes = chunk_order.chunk_sizes(documents, fixed)
        assert sum(sizes) == documents and min(sizes) >= 1
    assert set(chunk_order.chunk_sizes(documents, 100)[:-1]) <= {100}
    order = chunk_order.document_order(documents, seed=1, task="t")
    pieces = chunk_order.chunks(order, chunk_order.chunk_sizes(documents))
    assert [index for piece in pieces for index in piece] == order


def test_a_chunk_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        chunk_order.chunk_sizes(100, 0)
    with pytest.raises(ValueError):
        chunk_order.chunks([0, 1, 2], [2])


def test_chunks_cover_the_order_once_in_order() -> None:
    order = chunk_order.document_order(150, seed=5, task="t")
    pieces = chunk_order.chunks(order, 64)
    assert [len(piece) for piece in pieces] == [64, 64, 22]
    assert [index for piece in pieces for index in piece] == order
    with pytest.raises(ValueError):
        chunk_order.chunks(order, 0)
