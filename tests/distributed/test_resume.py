"""With --use_cache, a rerun after a failed distributed run computes only what is missing."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.distributed import harness
from tests.distributed.conftest import Reference, computed_keys

pytestmark = pytest.mark.distributed


def _cached_keys(cache_prefix: Path) -> set[str]:
    keys: set[str] = set()
    for path in cache_prefix.parent.glob(cache_prefix.name + "_rank*.db"):
        with sqlite3.connect(path) as db:
            keys.update(row[0] for row in db.execute("SELECT key FROM responses"))
    return keys


def test_rerun_after_failure_recomputes_nothing_already_done(
    task_dir: Path, reference: Reference, tmp_path: Path
) -> None:
    spec = harness.spec_file(tmp_path / "spec.json")
    cache = tmp_path / "cache" / "responses"

    def argv(out: str) -> list[str]:
        return [
            "runner",
            "--spec",
            str(spec),
            "--include_path",
            str(task_dir),
            "--output-dir",
            str(tmp_path / out),
            "--use_cache",
            str(cache),
        ]

    # First run: rank 1 dies when it reaches its generation requests.
    env = harness.base_env(
        ASSAY_TEST_CALL_LOG=str(tmp_path / "first"),
        ASSAY_TEST_FAIL_RANK="1",
        ASSAY_TEST_FAIL_MODE="exit",
        ASSAY_TEST_FAIL_AT="generate_until",
    )
    first = harness.launch(argv("out1"), env=env, nproc=2)
    assert first.returncode != 0
    done = _cached_keys(cache)
    assert done, "the first run's finished requests are in the cache"
    assert done < set(reference.computed), "and some requests were never finished"

    # Second run: nothing breaks; the model is asked only for what the cache lacks.
    env = harness.base_env(ASSAY_TEST_CALL_LOG=str(tmp_path / "second"))
    second = harness.launch(argv("out2"), env=env, nproc=2)
    assert second.returncode == 0, second.output
    recomputed = Counter(key for keys in computed_keys(tmp_path / "second").values() for key in keys)
    assert not set(recomputed) & done, "nothing already computed is computed again"
    assert recomputed == Counter(key for key in reference.computed if key not in done)

    results, samples = harness.read_outputs(tmp_path / "out2")
    assert harness.outcome(results)["results"] == reference.results["results"]
    assert samples == reference.samples
