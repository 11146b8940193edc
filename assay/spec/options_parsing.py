"""Parsing what the spec asks lm-eval for: spec.tasks, limit, samples, batchSize and seed.

Each parser reads one field through a `Reader` and raises a UserError naming it; `parsing`
reads the whole spec with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from assay import batch_size, run_rules
from assay.errors import UserError
from assay.run_options import DEFAULT_BOOTSTRAP_ITERS, SentinelSettings
from assay.spec import kube_names
from assay.spec.model import SEED_STRING_RE, Seed
from assay.spec.reader import Reader, kind

# The CRD's bounds on what a user writes (deploy/crds/evaluations.assay.dev.yaml), as in `parsing`.
_TASKS_MAX = 1000
_TASK_NAME_MAX = 256
_SAMPLE_TASKS_MAX = 1000
_SAMPLE_INDICES_MAX = 100_000
"""Document indices per task in spec.samples: a 200 KiB list of five-digit indices holds about 34000."""
_SEED_MAX = 128


def parse_tasks(r: Reader) -> tuple[str, ...]:
    value = r.get("tasks")
    if isinstance(value, str):
        raise UserError(f"spec.tasks must be a list of task names, not a string: write tasks: [{value}].")
    if value is not None and (isinstance(value, Mapping) or not isinstance(value, Sequence)):
        raise UserError(f"spec.tasks must be a list of task names, not {kind(value)}.")
    if not value:
        raise UserError("spec.tasks is required: list one or more task, group or tag names.")
    if len(value) > _TASKS_MAX:
        raise UserError(
            f"spec.tasks lists {len(value)} names; keep at most {_TASKS_MAX} (a group or tag names many tasks at once)."
        )
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"spec.tasks[{i}] must be a task name, not {kind(name)}.")
        if len(name) > _TASK_NAME_MAX:
            raise UserError(
                f"spec.tasks[{i}] is {len(name)} characters long; a task name has at most {_TASK_NAME_MAX}."
            )
    return tuple(name.strip() for name in value)


def parse_limit(r: Reader) -> int | float | None:
    value = r.get("limit")
    if value is None:
        return None
    if not run_rules.limit_is_valid(value):
        raise UserError(f"spec.limit must be a number above 0 (below 1.0: a fraction of the docs), not {value!r}.")
    if not run_rules.limit_is_count_or_fraction(value):
        raise UserError(
            f"spec.limit {value!r} is neither a whole count of documents nor a fraction below 1; "
            f"write e.g. {int(value)} or 0.5."
        )
    return int(value) if value >= 1 and value == int(value) else float(value)


def parse_samples(r: Reader) -> dict[str, tuple[int, ...]] | None:
    value = r.mapping("samples", max_entries=_SAMPLE_TASKS_MAX)
    if value is None:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for task, ids in value.items():
        if not 1 <= len(str(task)) <= _TASK_NAME_MAX:
            raise UserError(
                f"spec.samples key {kube_names.quoted(str(task))} must be a task name "
                f"of 1 to {_TASK_NAME_MAX} characters."
            )
        if (
            not isinstance(ids, Sequence)
            or isinstance(ids, str)
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        ):
            raise UserError(f"spec.samples.{task} must be a list of document indices (integers from 0).")
        if len(ids) > _SAMPLE_INDICES_MAX:
            raise UserError(
                f"spec.samples.{task} lists {len(ids)} documents; keep at most {_SAMPLE_INDICES_MAX} "
                "(or use spec.limit, or no selection, for a large share of the task)."
            )
        out[str(task)] = tuple(ids)
    return out


def parse_batch_size(r: Reader) -> batch_size.BatchSize:
    value = r.get("batchSize")
    if value is None:
        return batch_size.BatchSize(1)
    # The shared parser accepts exactly the CRD's forms (its CEL rule), so --local agrees with the API server.
    parsed = batch_size.BatchSize.parse(value, source="spec.batchSize")
    # a digit string given as its int, so that to_dict() round-trips and the results echo 8, not "8"
    fixed = parsed.fixed
    return parsed if fixed is None else batch_size.BatchSize(fixed, 1, fixed)


MAX_BOOTSTRAP_ITERS = 1_000_000
"""Ten times lm-eval's default: beyond it the stderr changes in digits nobody reads, and a run's CPU is a tenant's to spend."""


def parse_bootstrap_iters(r: Reader) -> int:
    """spec.bootstrapIters: lm-eval's --bootstrap_iters (default 100,000; 0 computes no bootstrap stderr)."""
    iterations = r.integer("bootstrapIters", DEFAULT_BOOTSTRAP_ITERS, minimum=0)
    assert iterations is not None
    if iterations > MAX_BOOTSTRAP_ITERS:
        raise UserError(f"spec.bootstrapIters must be at most {MAX_BOOTSTRAP_ITERS:,}, not {iterations:,}.")
    return iterations


def parse_seed(r: Reader) -> Seed:
    value = r.get("seed")
    if value is None:
        return Seed()
    if isinstance(value, int) and not isinstance(value, bool):
        return Seed(value, value, value, value)
    if isinstance(value, str) and len(value) <= _SEED_MAX and SEED_STRING_RE.fullmatch(value.replace(" ", "")):
        slots = [None if s.lower() in ("none", "null") else int(s) for s in value.replace(" ", "").split(",")]
        return Seed(*slots)
    raise UserError(
        f"spec.seed must be an integer (all four seeds) or four comma-separated values "
        f'"random,numpy,torch,fewshot" such as "0,1234,1234,None", not {value!r}.'
    )


SENTINEL_FIELDS = {
    "enabled": "enabled",
    "strict": "strict",
    "belowChanceAlpha": "below_chance_alpha",
    "degenerateFraction": "degenerate_fraction",
    "emptyFraction": "empty_fraction",
    "unparsedFraction": "unparsed_fraction",
    "truncatedFraction": "truncated_fraction",
    "retriedFraction": "retried_fraction",
    "cutByLengthFraction": "cut_by_length_fraction",
}
"""spec.sentinels' camelCase names → the settings' own (`assay run --sentinels` spells those)."""


def parse_sentinels(r: Reader) -> SentinelSettings:
    data = r.mapping("sentinels")
    if data is None:
        return SentinelSettings()
    sub = Reader(data, "spec.sentinels", set(SENTINEL_FIELDS))
    given: dict[str, bool | float] = {}
    for key, name in SENTINEL_FIELDS.items():
        value = sub.get(key)
        if value is None:
            continue
        if key in ("enabled", "strict"):
            given[name] = bool(sub.boolean(key, None))  # a string "true" is refused, as everywhere in the spec
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise UserError(f"{sub.where(key)} must be a number between 0 and 1, not {value!r}.")
        else:
            given[name] = float(value)
    return SentinelSettings.from_mapping(given, source="spec.sentinels", error=UserError)
