"""One converter per benchmark: raw public files → the hub-id layout tasks load.

Each converter writes every split of its benchmark as JSON Lines under
`<dst>/<hub id>/<config>/` and returns the files it wrote; the quirks of each source
(HellaSwag's re-processed context, OpenBookQA's joined choices, ...) are undone here.
See `importer` for the layout and the command.
"""

from __future__ import annotations

import bz2
import csv
import dataclasses
import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from assay.errors import UserError

Record = dict[str, Any]
# One converter writes every split of one benchmark; it returns the files it wrote.
Converter = Callable[[Path, Path], list[Path]]


def _write_jsonl(path: Path, records: Iterable[Record]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(path)  # never leave a half-written split behind
    return path


def _read_jsonl(path: Path) -> Iterator[Record]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _need(path: Path) -> Path:
    if not path.is_file():
        raise UserError(
            f"Benchmark source file {path} is missing; point --from at a copy of Assay's shared data folder."
        )
    return path


# ---------------------------------------------------------------- converters


def _gsm8k(src: Path, dst: Path) -> list[Path]:
    out = dst / "openai/gsm8k/main"
    written = []
    for split in ("test", "train"):
        rows = _read_jsonl(_need(src / f"gsm8k/{split}.jsonl"))
        records = ({"question": r["question"], "answer": r["answer"]} for r in rows)
        written.append(_write_jsonl(out / f"{split}.jsonl", records))
    return written


def _truthfulqa(src: Path, dst: Path) -> list[Path]:
    root = dst / "truthfulqa/truthful_qa"
    items = json.loads(_need(src / "truthfulqa/v0/mc_task.json").read_text(encoding="utf-8"))

    def targets(answers: dict[str, int]) -> Record:
        return {"choices": list(answers), "labels": list(answers.values())}

    mc = (
        {
            "question": it["question"],
            "mc1_targets": targets(it["mc1_targets"]),
            "mc2_targets": targets(it["mc2_targets"]),
        }
        for it in items
    )

    def split_answers(joined: str) -> list[str]:
        return [answer.strip() for answer in joined.strip().split(";")]

    # The CSV starts with a byte-order mark.
    with _need(src / "truthfulqa/v0/TruthfulQA.csv").open(encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    gen = (
        {
            "type": row["Type"],
            "category": row["Category"],
            "question": row["Question"],
            "best_answer": row["Best Answer"],
            "correct_answers": split_answers(row["Correct Answers"]),
            "incorrect_answers": split_answers(row["Incorrect Answers"]),
            "source": row["Source"],
        }
        for row in rows
    )
    return [
        _write_jsonl(root / "multiple_choice/validation.jsonl", mc),
        _write_jsonl(root / "generation/validation.jsonl", gen),
    ]


def _lambada(src: Path, dst: Path) -> list[Path]:
    records = ({"text": r["text"]} for r in _read_jsonl(_need(src / "lambada/lambada_test.jsonl")))
    return [_write_jsonl(dst / "EleutherAI/lambada_openai/default/test.jsonl", records)]


def wikitext_pages(raw: str) -> list[str]:
    """Split a raw WikiText file into article pages, as wikitext_document_level does."""
    pages: list[str] = []
    lines: list[str] = []
    for line in raw.split("\n"):
        # Only level-1 headings (" = Title = ") open a page; "= =" marks deeper levels.
        heading = line.replace("= = =", "===").replace("= =", "==").strip()
        if heading.startswith("= ") and heading.endswith(" ="):
            page = "\n".join(lines)
            if page.strip():
                pages.append(page)
            lines = []
        lines.append(line)
    pages.append("\n".join(lines))  # the last page is kept even if blank, like the builder
    return pages


def _wikitext(src: Path, dst: Path) -> list[Path]:
    raw = _need(src / "wikitext2/wiki.test.raw").read_text(encoding="utf-8")
    records = ({"page": page} for page in wikitext_pages(raw))
    return [_write_jsonl(dst / "EleutherAI/wikitext_document_level/wikitext-2-raw-v1/test.jsonl", records)]


def _piqa(src: Path, dst: Path) -> list[Path]:
    docs = list(_read_jsonl(_need(src / "piqa/valid.jsonl")))
    labels = [int(x) for x in _need(src / "piqa/valid-labels.lst").read_text().split()]
    if len(labels) != len(docs):
        raise UserError(
            f"PIQA has {len(docs)} questions but {len(labels)} labels; the source files do not belong together."
        )
    records = (
        {"goal": d["goal"], "sol1": d["sol1"], "sol2": d["sol2"], "label": y}
        for d, y in zip(docs, labels, strict=False)
    )
    return [_write_jsonl(dst / "baber/piqa/default/validation.jsonl", records)]


_SENTENCE_END = re.compile(r"[.!?] ")


def split_hellaswag_context(ctx: str) -> tuple[str, str]:
    """Best guess at the hub's (ctx_a, ctx_b) from the joined context; see module docstring."""
    breaks = list(_SENTENCE_END.finditer(ctx))
    if breaks:
        tail = ctx[breaks[-1].end() :]
        if tail[:1].islower():
            return ctx[: breaks[-1].start() + 1], tail
    return ctx, ""


def _hellaswag(src: Path, dst: Path) -> list[Path]:
    with bz2.open(_need(src / "hellaswag/hellaswag_val_full.txt.bz2"), "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) % 6:
        raise UserError(
            "The HellaSwag source is not in 6-line records (context, label, 4 endings); it may be truncated."
        )

    def records() -> Iterator[Record]:
        for ind, start in enumerate(range(0, len(lines), 6)):
            head, label, *endings = lines[start : start + 6]
            activity_label, _, ctx = head.partition(": ")
            ctx_a, ctx_b = split_hellaswag_context(ctx)
            yield {
                "ind": ind,
                "activity_label": activity_label,
                "ctx_a": ctx_a,
                "ctx_b": ctx_b,
                "ctx": ctx,
                "endings": endings,
                "split": "val",
                "label": label.strip(),  # a string on the hub as well
            }

    return [_write_jsonl(dst / "Rowan/hellaswag/default/validation.jsonl", records())]


def _arc(src: Path, dst: Path) -> list[Path]:
    written = []
    for subset in ("Easy", "Challenge"):
        for split, suffix in (("test", "Test"), ("validation", "Dev")):
            rows = _read_jsonl(_need(src / f"arc/ARC-{subset}-{suffix}.jsonl"))
            records = (
                {
                    "id": r["id"],
                    "question": r["question"]["stem"],
                    "choices": {
                        "text": [c["text"] for c in r["question"]["choices"]],
                        "label": [c["label"] for c in r["question"]["choices"]],
                    },
                    "answerKey": r["answerKey"],
                }
                for r in rows
            )
            written.append(_write_jsonl(dst / f"allenai/ai2_arc/ARC-{subset}/{split}.jsonl", records))
    return written


def _boolq(src: Path, dst: Path) -> list[Path]:
    as_int = {"false": 0, "true": 1, False: 0, True: 1}
    records = (
        {"question": r["question"], "passage": r["passage"], "idx": r["idx"], "label": as_int[r["label"]]}
        for r in _read_jsonl(_need(src / "boolq/val.jsonl"))
    )
    return [_write_jsonl(dst / "aps/super_glue/boolq/validation.jsonl", records)]


def _copa(src: Path, dst: Path) -> list[Path]:
    keys = ("premise", "choice1", "choice2", "question", "idx", "label")
    records = ({k: r[k] for k in keys} for r in _read_jsonl(_need(src / "copa/val.jsonl")))
    return [_write_jsonl(dst / "aps/super_glue/copa/validation.jsonl", records)]


_OBQA_CHOICE = re.compile(r"\(([A-Z])\) ")


def split_openbookqa_choices(joined: str) -> Record:
    """'(A) x (B) y' -> {"text": ["x", "y"], "label": ["A", "B"]}."""
    parts = _OBQA_CHOICE.split(joined)
    # parts = ["", "A", "x ", "B", "y"]; anything before the first marker is empty.
    labels = parts[1::2]
    texts = [t.strip() for t in parts[2::2]]
    return {"text": texts, "label": labels}


def _openbookqa(src: Path, dst: Path) -> list[Path]:
    written = []
    for split, name in (("test", "test"), ("validation", "dev")):
        with _need(src / f"openbookqa/{name}.tsv").open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        records = (
            {
                "id": row["ID"],
                "question_stem": row["Question Stem"],
                "choices": split_openbookqa_choices(row["Choices"]),
                "answerKey": row["Answer Key"],
            }
            for row in rows
        )
        written.append(_write_jsonl(dst / f"allenai/openbookqa/main/{split}.jsonl", records))
    return written


def rebuild_winogrande(context_options: list[str], continuation: str, gold: int) -> Record:
    """MosaicML's partial form -> {sentence, option1, option2, answer}; see module docstring."""
    first, second = context_options
    common = 0
    while common < min(len(first), len(second)) and first[common] == second[common]:
        common += 1
    # Back off to a word start so that shared leading letters stay in the options.
    cut = first.rfind(" ", 0, common) + 1
    prefix = first[:cut]
    return {
        "sentence": prefix + "_ " + continuation.lstrip(),
        "option1": first[cut:],
        "option2": second[cut:],
        "answer": str(gold + 1),
    }


def _winogrande(src: Path, dst: Path) -> list[Path]:
    records = (
        rebuild_winogrande(r["context_options"], r["continuation"], r["gold"])
        for r in _read_jsonl(_need(src / "winogrande/winogrande.jsonl"))
    )
    return [_write_jsonl(dst / "allenai/winogrande/winogrande_xl/validation.jsonl", records)]


def _mmlu(src: Path, dst: Path) -> list[Path]:
    folders = {"test": "test", "validation": "val", "dev": "dev"}
    subjects = sorted(p.name[: -len("_test.csv")] for p in (src / "mmlu/test").glob("*_test.csv"))
    if not subjects:
        raise UserError(f"No MMLU subjects found under {src / 'mmlu/test'}; expected files named <subject>_test.csv.")
    written = []
    for subject in subjects:
        for split, folder in folders.items():
            with _need(src / f"mmlu/{folder}/{subject}_{folder}.csv").open(encoding="utf-8", newline="") as f:
                rows = list(csv.reader(f))
            records = (
                {"question": q, "subject": subject, "choices": [a, b, c, d], "answer": "ABCD".index(key.strip())}
                for q, a, b, c, d, key in rows
            )
            written.append(_write_jsonl(dst / f"cais/mmlu/{subject}/{split}.jsonl", records))
    return written


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark the importer converts: what it reads and what it writes."""

    folder: str
    """The source folder under --from that must exist."""
    convert: Converter
    sources: str
    """The files read, as a pattern under --from (what `assay data import --help` lists)."""
    datasets: tuple[str, ...]
    """The `<hub id>/<config>` folders written; `*` stands for every config (MMLU's subjects)."""


# Names are what --only takes.
BENCHMARKS: dict[str, Benchmark] = {
    "arc": Benchmark(
        "arc",
        _arc,
        "arc/ARC-{Easy,Challenge}-{Test,Dev}.jsonl",
        ("allenai/ai2_arc/ARC-Easy", "allenai/ai2_arc/ARC-Challenge"),
    ),
    "boolq": Benchmark("boolq", _boolq, "boolq/val.jsonl", ("aps/super_glue/boolq",)),
    "copa": Benchmark("copa", _copa, "copa/val.jsonl", ("aps/super_glue/copa",)),
    "gsm8k": Benchmark("gsm8k", _gsm8k, "gsm8k/{test,train}.jsonl", ("openai/gsm8k/main",)),
    "hellaswag": Benchmark(
        "hellaswag", _hellaswag, "hellaswag/hellaswag_val_full.txt.bz2", ("Rowan/hellaswag/default",)
    ),
    "lambada": Benchmark("lambada", _lambada, "lambada/lambada_test.jsonl", ("EleutherAI/lambada_openai/default",)),
    "mmlu": Benchmark("mmlu", _mmlu, "mmlu/{dev,val,test}/<subject>_{dev,val,test}.csv", ("cais/mmlu/*",)),
    "openbookqa": Benchmark("openbookqa", _openbookqa, "openbookqa/{test,dev}.tsv", ("allenai/openbookqa/main",)),
    "piqa": Benchmark("piqa", _piqa, "piqa/valid.jsonl, piqa/valid-labels.lst", ("baber/piqa/default",)),
    "truthfulqa": Benchmark(
        "truthfulqa",
        _truthfulqa,
        "truthfulqa/v0/{mc_task.json,TruthfulQA.csv}",
        ("truthfulqa/truthful_qa/multiple_choice", "truthfulqa/truthful_qa/generation"),
    ),
    "wikitext": Benchmark(
        "wikitext2", _wikitext, "wikitext2/wiki.test.raw", ("EleutherAI/wikitext_document_level/wikitext-2-raw-v1",)
    ),
    "winogrande": Benchmark(
        "winogrande", _winogrande, "winogrande/winogrande.jsonl", ("allenai/winogrande/winogrande_xl",)
    ),
}


def benchmark_writing(folder: str) -> str | None:
    """The benchmark whose import writes `<hub id>/<config>`, if any."""
    for name, benchmark in BENCHMARKS.items():
        if any(fnmatch.fnmatchcase(folder, pattern) for pattern in benchmark.datasets):
            return name
    return None
