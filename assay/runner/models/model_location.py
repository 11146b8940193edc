"""Where a model_args name points: a local directory, or a Hugging Face hub id and its cache.

transformers and vLLM take either in the same argument (`pretrained=gpt2`,
`pretrained=/models/llama`), and each fails late and at length when the name leads
nowhere. These rules decide it up front without importing either library: a name that is
clearly a path must exist, and an offline hub id must have a snapshot in the local cache
(the layout huggingface_hub writes: `models--org--name/refs/<revision>` holding a commit,
`models--org--name/snapshots/<commit>/`).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_REVISION = "main"


def looks_like_path(name: str) -> bool:
    """True for a name meant as a directory: hub ids are `name` or `org/name`."""
    return name.startswith((".", "/", "~")) or name.rstrip("/").count("/") > 1


def exists_locally(name: str) -> bool:
    return Path(name).expanduser().exists()


def hub_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The hub cache a load uses: the model_args' own `cache_dir`, else huggingface_hub's."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    """huggingface_hub's own reading of HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, which transformers uses."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def offline_variable() -> str:
    """The environment variable that turned offline mode on, to name it in a message."""
    return "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"


def in_hub_cache(repo_id: str, *, revision: str | None, cache: Path) -> bool:
    """Whether `cache` holds a snapshot of the model repo at `revision` (a branch, tag or commit).

    A branch or tag resolves through `refs/`, as huggingface_hub resolves it offline; a
    name without a ref is taken as the commit itself."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    revision = revision or DEFAULT_REVISION
    ref = repo / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    except OSError:
        return False
    return bool(commit) and (repo / "snapshots" / commit).is_dir()
