"""Which model a response cache's answers belong to: the identity kept in its `meta` table.

A response cache's keys are lm-eval's, the request alone; the model is not in them. So
each cache file records the one model it was written for, and a run of any other model
refuses it (`assay.runner.models.caching`). The identity has three parts:

- the backend: the LM class (so the `hf` and `huggingface` aliases are one backend), by the
  `module.Class` it was first written under: a built-in class that moved keeps its name;
- the model_args that change answers: all of them but the short list below. Counting an
  argument Assay does not know is the safe side: at worst a cache that would have been right
  is refused, never a wrong one served. Left out are arguments that only decide where or
  how fast the same computation runs (device, placement, memory limits, parallel sizes,
  batch sizes, concurrency, transport), where downloads are kept, and secrets, which must
  never be written to a volume others read. Batch sizes are out although a padded batch
  moves a float in its last bits: resuming with the same cache at another batch size is
  what lm-eval does too, and the difference is within parity tolerance;
- a fingerprint of each local checkpoint an argument names (pretrained, tokenizer, peft,
  delta, ...), and the commit of a hub id found in the local hub cache. A fingerprint hashes
  each file's name and size, and small files whole; of a large file (the weights) it reads
  32 pieces of 4 KiB spread over it. Content, not modification times: a checkpoint copied
  again (an init container that downloads it into each pod) is the same model and a
  replaced pod must still find its answers, while a retrained checkpoint differs in every
  piece. It stays cheap on network volumes (at most ~128 KiB read per large file, 256
  files per directory). Its limit: a checkpoint changed only in a few weights can pass for
  the old one; give a new checkpoint a new directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# model_args that do not change an answer: where and how fast it is computed, not what.
NOT_ANSWERS = frozenset(
    {
        "batch_size",
        "max_batch_size",
        "device",
        "device_map",
        "parallelize",
        "max_memory_per_gpu",
        "max_cpu_memory",
        "offload_folder",
        "offload_state_dict",
        "low_cpu_mem_usage",
        "tensor_parallel_size",
        "data_parallel_size",
        "pipeline_parallel_size",
        "gpu_memory_utilization",
        "swap_space",
        "cpu_offload_gb",
        "enforce_eager",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "distributed_executor_backend",
        "disable_custom_all_reduce",
        "block_size",
        "logits_cache",
        "num_concurrent",
        "max_retries",
        "timeout",
        "verify_certificate",
        "ca_cert_path",
        "cache_dir",
        "download_dir",
        "local_files_only",
        "trust_remote_code",
    }
)
# credentials: never written into a cache file
SECRETS = frozenset({"token", "use_auth_token", "auth_token", "api_key", "header", "headers"})
# arguments that may name a hub repository when they are not a local path
_HUB_ARGS = ("pretrained", "tokenizer", "peft", "delta", "model")

_WHOLE_FILE_BYTES = 4 << 20
_PIECES = 32
_PIECE_BYTES = 4096
_MAX_FILES = 256

# Built-in backends that moved into packages by family (hf/, api/, vllm/), by the name their
# caches were written under before: a moved class computes the same answers.
_FIRST_NAMES = {
    "assay.runner.models.hf.model.HFLM": "assay.runner.models.hf.HFLM",
    "assay.runner.models.vllm.engine.VLLMLM": "assay.runner.models.vllm_engine.VLLMLM",
    **{
        f"assay.runner.models.api.{module}.{name}": f"assay.runner.models.api_{module}.{name}"
        for module, names in (
            ("completions", ("CompletionsLM", "OpenAICompletionsLM")),
            ("chat", ("ChatCompletionsLM", "OpenAIChatCompletionsLM")),
        )
        for name in names
    },
}


@dataclasses.dataclass(frozen=True)
class ModelIdentity:
    backend: str
    """`module.Class` of the LM that computes the answers."""
    args: Mapping[str, Any]
    """The model_args that change answers, as JSON values."""
    checkpoints: Mapping[str, str]
    """Per argument naming a checkpoint: its fingerprint, or `hub:<commit>`."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> ModelIdentity:
        data = json.loads(text)
        return cls(backend=str(data["backend"]), args=dict(data["args"]), checkpoints=dict(data["checkpoints"]))

    def describe(self) -> str:
        """`HFLM pretrained=/models/a dtype=float32 (pretrained checkpoint 1a2b3c4d)`, bounded for a message."""
        words = [self.backend.rsplit(".", 1)[-1], *(f"{k}={_short(v)}" for k, v in sorted(self.args.items()))]
        text = " ".join(words)
        marks = [
            f"{arg} checkpoint {value.removeprefix('hub:')[:8]}" for arg, value in sorted(self.checkpoints.items())
        ]
        if marks:
            text += f" ({', '.join(marks)})"
        return text if len(text) <= 300 else text[:297] + "..."


def identify(lm: object, model_args: Mapping[str, Any] | None) -> ModelIdentity:
    """The identity of `lm`, built from `model_args` (None: a caller's own instance, known by its class)."""
    kind = type(lm)
    given = dict(model_args or {})
    args = {k: _json_value(v) for k, v in given.items() if k not in NOT_ANSWERS and k not in SECRETS}
    checkpoints = _checkpoints(args, cache_dir=given.get("cache_dir"))
    backend = f"{kind.__module__}.{kind.__qualname__}"
    return ModelIdentity(backend=_FIRST_NAMES.get(backend, backend), args=args, checkpoints=checkpoints)


def _checkpoints(args: Mapping[str, Any], *, cache_dir: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    subfolder = args.get("subfolder") if isinstance(args.get("subfolder"), str) else ""
    for key, value in args.items():
        if not isinstance(value, str) or not value:
            continue
        path = Path(value).expanduser()
        if path.exists():
            found[key] = fingerprint(path / subfolder if subfolder and path.is_dir() and key == "pretrained" else path)
        elif key in _HUB_ARGS:
            commit = _hub_commit(value, args.get("revision"), cache_dir)
            if commit:
                found[key] = f"hub:{commit}"
    return found


def fingerprint(path: Path) -> str:
    """16 hex digits that change when the checkpoint file or directory at `path` does."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else _checkpoint_files(path)
    for file in files:
        digest.update(f"{file.name}\0".encode())
        try:
            _digest_file(file, digest)
        except OSError as error:  # an unreadable file still counts, as unreadable
            digest.update(f"unreadable {error.errno}\0".encode())
    return digest.hexdigest()[:16]


def _digest_file(file: Path, digest: Any) -> None:
    size = file.stat().st_size
    digest.update(f"{size}\0".encode())
    with file.open("rb") as handle:
        if size <= _WHOLE_FILE_BYTES:
            digest.update(handle.read())
            return
        for piece in range(_PIECES):
            handle.seek((size - _PIECE_BYTES) * piece // (_PIECES - 1))
            digest.update(handle.read(_PIECE_BYTES))


def _checkpoint_files(directory: Path) -> list[Path]:
    """The directory's own files (not subdirectories: a training run's checkpoint-N folders), no dotfiles."""
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if not entry.name.startswith(".") and entry.is_file()][:_MAX_FILES]


def _hub_commit(repo: str, revision: Any, cache_dir: Any) -> str:
    """The commit a hub id resolves to in the local hub cache, read offline; '' when not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return ""
    try:
        found = try_to_load_from_cache(
            repo,
            "config.json",
            cache_dir=cache_dir if isinstance(cache_dir, str) else None,
            revision=revision if isinstance(revision, str) else None,
        )
    except Exception:
        return ""
    # <cache>/models--org--name/snapshots/<commit>/config.json
    return Path(found).parent.name if isinstance(found, str) else ""


def _json_value(value: Any) -> Any:
    """A model_arg as the JSON value it is stored as (a torch dtype or other object by its text)."""
    return json.loads(json.dumps(value, default=str))


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
