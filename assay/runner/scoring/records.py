"""What scoring hands on: one document's scores, as each rank sends them to rank 0.

Rank 0 gathers these from every rank, sorts them back into document order per task and
filter, and aggregates (see `results.assemble`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from assay.runner.scoring.sentinels import DocEvidence


@dataclasses.dataclass(frozen=True)
class DocScores:
    task: str
    filter_index: int
    """Which of the task's filter pipelines produced the responses scored."""
    position: int
    """The document's place in the task's evaluation order."""
    scores: Mapping[str, Any]
    """metric → this document's value, as `process_results` returned them."""
    sample: Mapping[str, Any] | None
    """The samples-JSONL record (with --log_samples), else None."""
    evidence: DocEvidence | None = None
    """What the document's responses say about the engine (on its first filter's record only)."""
