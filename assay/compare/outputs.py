"""Finding and reading one run's lm-eval-format output: the results JSON and its samples.

Assay and lm-eval 0.4.x write the same files (assay/runner/results/output.py): under
`--output_path DIR`, `DIR/<model>/results_<date_id>.json` with `samples_<task>_<date_id>.jsonl`
beside it; under `--output_path FILE.json`, `FILE_<date_id>.json` with the samples in
FILE's folder. A run is given as either folder or as the results file itself; the samples
that belong to a results file are the ones with its date_id.

A runner Job also writes `scores_<task>_<date_id>.jsonl` beside its results, whatever
`logSamples` says: each samples line reduced to its identity and metric values (no
document, prompt or responses), so that any finished Evaluation can be a baseline. A task
with both files is read from its samples.

A task whose documents come in clusters (questions sharing a passage) names the document
field in its YAML's metadata, `metadata: {cluster_key: passage}` (lm-eval's TaskConfig
refuses keys it does not know, and keeps `metadata` in the results JSON's `configs`). Each
sample's cluster is then a digest of `doc[cluster_key]`; a scores_ line, which has no
document, carries that digest as `cluster`.

Only the fields a comparison needs are kept from each sample line (the document, prompt
and responses are dropped as soon as a line is parsed), so that two MMLU-sized runs fit
in little memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.errors import UsageError
from assay.run_results import RunResults

DATE_ID = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
_SAMPLES = re.compile(rf"(?P<kind>samples|scores)_(?P<task>.+)_(?P<date>{DATE_ID})\.jsonl")
_KEPT = ("doc_id", "doc_hash", "prompt_hash", "filter")


@dataclasses.dataclass(frozen=True)
class Sample:
    """One document's line for one filter: its identity and its per-document metric values."""

    doc_id: int
    doc_hash: str
    prompt_hash: str
    filter: str
    values: Mapping[str, Any]
    cluster: str | None = None
    """The document's cluster (a digest of its `cluster_key` field); None without one."""


@dataclasses.dataclass(frozen=True)
class RunOutput:
    """One run: its results JSON and, per task, the samples file written with it."""

    label: str
    """The path as the user gave it."""
    results_path: Path
    results: RunResults
    samples_paths: Mapping[str, Path]
    notes: tuple[str, ...] = ()
    in_memory: Mapping[str, list[Sample]] | None = None
    """Per task, samples already in memory (a run that has not written its files yet)."""

    def tasks_with_samples(self) -> set[str]:
        return set(self.in_memory or ()) | set(self.samples_paths)

    def samples(self, task: str) -> list[Sample]:
        if self.in_memory is not None and task in self.in_memory:
            return self.in_memory[task]
        return read_samples(self.samples_paths[task], label=self.label, cluster_key=self.cluster_key(task))

    def cluster_key(self, task: str) -> str | None:
        return cluster_key(self.results.config_of(task))


def cluster_key(config: Mapping[str, Any]) -> str | None:
    """The document field that names a task's clusters: `metadata.cluster_key` (or a top-level `cluster_key`)."""
    metadata = config.get("metadata")
    key = metadata.get("cluster_key") if isinstance(metadata, dict) else None
    key = key if key is not None else config.get("cluster_key")
    return key if isinstance(key, str) and key else None


def cluster_id(value: Any) -> str:
    """A short, stable name for a cluster value (passages are long; only equality matters)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def run_in_memory(results: RunResults, samples: Mapping[str, Any], *, label: str) -> RunOutput:
    """A run from its results and its samples records (lm-eval's `samples` member)."""
    loaded = {
        task: [
            _sample(
                record, path=Path(label), number=number, label=label, cluster_key=cluster_key(results.config_of(task))
            )
            for number, record in enumerate(records, start=1)
        ]
        for task, records in samples.items()
    }
    return RunOutput(label=label, results_path=Path(label), results=results, samples_paths={}, in_memory=loaded)


def read_run(path: str | Path, *, label: str) -> RunOutput:
    """The run at `path` (an output folder or a results JSON); UsageError if there is none."""
    location = Path(path)
    notes: list[str] = []
    if location.is_dir():
        results_path = _newest_results(location, label=label, notes=notes)
    elif location.is_file():
        results_path = location
    else:
        raise UsageError(
            f"{label} {path} does not exist; give an output folder or a results JSON written by `assay run` or `lm_eval`."
        )
    results = _load_results(results_path, label=label)
    return RunOutput(
        label=label,
        results_path=results_path,
        results=results,
        samples_paths=_samples_beside(results_path),
        notes=tuple(notes),
    )


def _newest_results(folder: Path, *, label: str, notes: list[str]) -> Path:
    found = sorted(folder.rglob("results_*.json"), key=lambda p: (_date_id(p) or "", str(p)))
    if not found:
        raise UsageError(f"{label} {folder} holds no results_*.json; run with --output_path and --log_samples.")
    if len(found) > 1:
        notes.append(f"{label}: {len(found)} results files under {folder}; using the newest, {found[-1]}.")
    return found[-1]


def _date_id(path: Path) -> str | None:
    match = re.search(rf"_({DATE_ID})$", path.stem)
    return match.group(1) if match else None


def _load_results(path: Path, *, label: str) -> RunResults:
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{label} {path} is not a readable results JSON ({error}).") from None
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise UsageError(f"{label} {path} has no `results` object; is it a results JSON from `assay run` or `lm_eval`?")
    return RunResults.from_lmeval_dict(results)


def _samples_beside(results_path: Path) -> dict[str, Path]:
    date_id = _date_id(results_path)
    found: dict[str, Path] = {}
    # scores_ before samples_: a task's samples file, when there is one, wins.
    for pattern in ("scores_*.jsonl", "samples_*.jsonl"):
        for candidate in sorted(results_path.parent.glob(pattern)):
            match = _SAMPLES.fullmatch(candidate.name)
            if match and (date_id is None or match.group("date") == date_id):
                found[match.group("task")] = candidate
    return found


SCORE_FIELDS = ("doc_id", "doc_hash", "prompt_hash", "filter", "metrics")
"""What a scores_ line keeps of a samples line, besides the metric values it names."""


def score_line(sample: Mapping[str, Any], *, cluster_key: str | None = None) -> dict[str, Any]:
    """A samples-JSONL record reduced to a scores_ line (with its `cluster` under a cluster_key)."""
    kept = {key: sample[key] for key in SCORE_FIELDS if key in sample}
    cluster = _cluster(sample, cluster_key)
    if cluster is not None:
        kept["cluster"] = cluster
    kept.update((name, sample[name]) for name in sample.get("metrics") or () if name in sample)
    return kept


def read_samples(path: Path, *, label: str, cluster_key: str | None = None) -> list[Sample]:
    """Every line of one samples JSONL, reduced to what pairing needs."""
    samples = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    samples.append(
                        _sample(json.loads(line), path=path, number=number, label=label, cluster_key=cluster_key)
                    )
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{label} {path} is not a readable samples JSONL ({error}).") from None
    return samples


def _sample(record: Any, *, path: Path, number: int, label: str, cluster_key: str | None = None) -> Sample:
    if not isinstance(record, dict) or any(key not in record for key in ("doc_id", "doc_hash")):
        raise UsageError(
            f"{label} {path} line {number} has no doc_id and doc_hash; was it written by lm-eval 0.4 or Assay?"
        )
    names = record.get("metrics") or [k for k in record if k not in _KEPT and k not in _NOT_METRICS]
    return Sample(
        doc_id=int(record["doc_id"]),
        doc_hash=str(record["doc_hash"]),
        prompt_hash=str(record.get("prompt_hash", "")),
        filter=str(record.get("filter", "none")),
        values={name: record[name] for name in names if name in record},
        cluster=_cluster(record, cluster_key),
    )


def _cluster(record: Mapping[str, Any], cluster_key: str | None) -> str | None:
    """A scores_ line's `cluster`, else the digest of the document's cluster_key field, else None."""
    if record.get("cluster") is not None:
        return str(record["cluster"])
    doc = record.get("doc")
    if cluster_key is None or not isinstance(doc, dict) or doc.get(cluster_key) is None:
        return None
    return cluster_id(doc[cluster_key])


_NOT_METRICS = frozenset({"doc", "target", "arguments", "resps", "filtered_resps", "metrics", "target_hash", "cluster"})
