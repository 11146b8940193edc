"""Helpers shared by several test folders: task YAML fixtures written into a temp folder.

The task YAMLs live as files under tests/fixtures/tasks/<set>/. Their dataset paths name
`@DATA@` (the offline benchmark files, ASSAY_SHARED_DATA) and `@WORK@` (a folder the test
writes data into); `copy_tasks` fills those in, so Assay and lm-eval load the very same
files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"


def copy_tasks(name: str, dst: Path, *, data: Path | None = None, work: Path | None = None) -> Path:
    """tests/fixtures/tasks/<name> into `dst`, with its @DATA@ and @WORK@ placeholders filled in."""
    dst.mkdir(parents=True, exist_ok=True)
    for src in sorted((FIXTURES / name).iterdir()):
        if not src.is_file():
            continue
        text = src.read_text()
        if src.suffix == ".yaml":
            if data is not None:
                text = text.replace("@DATA@", json.dumps(str(data))[1:-1])  # inside JSON-style strings
            if work is not None:
                text = text.replace("@WORK@", str(work))
        (dst / src.name).write_text(text)
    return dst


def write_parity_tasks(root: Path, data: Path, work: Path) -> Path:
    """The p_* parity tasks; BoolQ reads a copy of its first 200 rows with integer labels."""
    rows = [json.loads(line) for line in (data / "boolq/val.jsonl").read_text().splitlines()[:200]]
    work.mkdir(parents=True, exist_ok=True)
    (work / "boolq.jsonl").write_text(
        "".join(json.dumps({**row, "label": int(row["label"] in (True, "true"))}) + "\n" for row in rows)
    )
    return copy_tasks("parity", root, data=data, work=work)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def head_jsonl(path: Path, n: int) -> list[dict[str, Any]]:
    """The first `n` records of a JSON Lines file (without reading the rest)."""
    rows = []
    for row in read_jsonl(path):
        rows.append(row)
        if len(rows) == n:
            break
    return rows


def count_prompt_prefixes(monkeypatch: Any) -> list[int]:
    """The length of every generation PrefixCache built from now on (the real class still runs)."""
    from assay.runner.models.hf import prompt_prefix

    built: list[int] = []
    real_init = prompt_prefix.PrefixCache.__init__

    def counting_init(self: Any, model: Any, prefix: list[int], **kwargs: Any) -> None:
        built.append(len(prefix))
        real_init(self, model, prefix, **kwargs)

    monkeypatch.setattr(prompt_prefix.PrefixCache, "__init__", counting_init)
    return built


def write_choice_task(
    folder: Path,
    name: str,
    rows: list[dict[str, Any]],
    *,
    metrics: tuple[str, ...] = ("acc",),
    cluster_key: str | None = None,
) -> Path:
    """A multiple-choice task `name` over `rows` ({q, choices, label}) as a local JSONL file,
    its YAML beside it in `folder`; `cluster_key` makes its scores clustered."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    metric_lines = "".join(f"  - {{metric: {m}, aggregation: mean, higher_is_better: true}}\n" for m in metrics)
    cluster = f", cluster_key: {cluster_key}" if cluster_key else ""
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\n"
        "dataset_path: json\n"
        f'dataset_kwargs: {{data_files: {{"test": {json.dumps(str(data))}}}}}\n'
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{q}}\\nAnswer:"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{label}}"\n'
        f"metric_list:\n{metric_lines}"
        f"metadata: {{version: 1.0{cluster}}}\n"
    )
    return data
