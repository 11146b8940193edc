"""Shared fixtures: where the offline benchmark data lives, and the CI rule for it.

ASSAY_SHARED_DATA points at the public benchmark files and GPT-2 tokenizer (default
`../shared/data` beside the checkout). Outside CI a test that needs them skips with the
reason; under CI (CI=true) their absence fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
