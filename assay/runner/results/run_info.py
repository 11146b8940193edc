"""Provenance recorded in the results JSON: git hash and software versions."""

from __future__ import annotations

import importlib.metadata
import subprocess
from typing import Any

import assay


def git_hash() -> str | None:
    try:
        out = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment() -> dict[str, Any]:
    """Keys lm-eval writes (pretty_env_info, transformers_version, lm_eval_version, upper_git_hash)."""
    info: dict[str, Any] = {"pretty_env_info": _pretty_env_info(), "transformers_version": None}
    try:  # its installed version, without importing it (about 1 s a run that does not use it)
        info["transformers_version"] = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pass
    # lm-eval readers look for lm_eval_version; Assay records its own version there and by name.
    info["lm_eval_version"] = assay.__version__
    info["assay_version"] = assay.__version__
    info["upper_git_hash"] = None
    return info


def _pretty_env_info() -> str:
    import platform
    import sys

    parts = [f"Python {sys.version.split()[0]}", platform.platform()]
    try:
        import torch

        parts.append(f"torch {torch.__version__} (CUDA available: {torch.cuda.is_available()})")
    except ImportError:
        pass
    return "; ".join(parts)
