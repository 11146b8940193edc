"""Shared fixtures: where the offline benchmark data lives, and the CI rule for it.

ASSAY_SHARED_DATA points at the public benchmark files and GPT-2 tokenizer (default
`../shared/data` beside the checkout). Outside CI a test that needs them skips with the
reason; under CI (CI=true) their absence fails the test.

Every test also gets its tier markers here (registered in pyproject.toml): `e2e`, `served` and
`distributed` by the folder it lives in, `model` when it requests a fixture of
tests/model_fixtures.py (directly or through another fixture; a test that builds a model
otherwise carries the mark itself), and `fast` when it has none of these nor `parity` or
`slow`. `python -m pytest -q -m fast` is the quick loop.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
MODEL_FIXTURES = TESTS / "model_fixtures.py"
FOLDER_TIERS = ("e2e", "served", "distributed")  # each the marker of everything under tests/<it>
# A test with any of these is not `fast`: it needs a cluster, an engine, several processes or a model.
HEAVY_TIERS = ("e2e", "served", "distributed", "parity", "model", "slow")


def _requests_a_model(item: pytest.Item) -> bool:
    """Whether one of the test's fixtures (its whole closure) builds a model in tests/model_fixtures.py."""
    info = getattr(item, "_fixtureinfo", None)  # Function items only; pytest keeps the closure's definitions here
    if info is None:
        return False
    return any(
        Path(definition.func.__code__.co_filename).resolve() == MODEL_FIXTURES
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so that the markers added here select
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.resolve()
        folder = path.relative_to(TESTS).parts[0] if path.is_relative_to(TESTS) else ""
        if folder in FOLDER_TIERS:
            item.add_marker(folder)
        if _requests_a_model(item):
            item.add_marker("model")
        if not any(item.get_closest_marker(tier) for tier in HEAVY_TIERS):
            item.add_marker("fast")


def shared_data_dir() -> Path:
    return Path(os.environ.get("ASSAY_SHARED_DATA", REPO_ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not (path / "gpt2_tokenizer" / "vocab.json").is_file():
        message = f"benchmark data not found at {path} (set ASSAY_SHARED_DATA)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def converted(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared benchmark files converted once into the ASSAY_DATASETS_DIR layout."""
    from assay.runner.data import importer

    dst = tmp_path_factory.mktemp("assay_datasets")
    importer.import_benchmarks(shared_data, dst)
    return dst


@pytest.fixture(autouse=True)
def _no_leaked_task_code_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """`job.main` in the test process sets ASSAY_TASK_CODE, as a runner pod's does: undone after
    each test, so that a later test's include path is not taken for a tenant's (confined data)."""
    monkeypatch.delenv("ASSAY_TASK_CODE", raising=False)


@pytest.fixture(scope="module")
def parity_task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The p_* parity tasks (`tests.helpers.write_parity_tasks`) in a folder of their own, per module."""
    from tests.helpers import write_parity_tasks

    root = tmp_path_factory.mktemp("parity_tasks")
    write_parity_tasks(root, shared_data, tmp_path_factory.mktemp("parity_work"))
    return root
