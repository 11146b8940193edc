"""Convert raw public benchmark files into the `ASSAY_DATASETS_DIR` layout.

The task YAMLs name Hugging Face hub datasets (`allenai/ai2_arc`, config `ARC-Easy`, ...).
On an air-gapped cluster the hub is out of reach, so this module rewrites the files that
the benchmark authors published into what the hub dataset would yield: one JSONL file per
split at `<dst>/<hub dataset id>/<config or "default">/<split>.jsonl`, with the hub's
column names and types. `datasets_local.load_task_dataset` then serves those files in place
of the hub, and no task YAML changes.

Expected source layout (as in Assay's shared/data folder, see its README):

    gsm8k/{test,train}.jsonl                 -> openai/gsm8k/main
    truthfulqa/v0/{mc_task.json,TruthfulQA.csv}
                                             -> truthfulqa/truthful_qa/{multiple_choice,generation}
    lambada/lambada_test.jsonl               -> EleutherAI/lambada_openai/default
    wikitext2/wiki.test.raw                  -> EleutherAI/wikitext_document_level/wikitext-2-raw-v1
    piqa/valid.jsonl + valid-labels.lst      -> baber/piqa/default
    hellaswag/hellaswag_val_full.txt.bz2     -> Rowan/hellaswag/default
    arc/ARC-{Easy,Challenge}-{Test,Dev}.jsonl
                                             -> allenai/ai2_arc/ARC-{Easy,Challenge}
    boolq/val.jsonl, copa/val.jsonl          -> aps/super_glue/{boolq,copa}
    openbookqa/{test,dev}.tsv                -> allenai/openbookqa/main
    winogrande/winogrande.jsonl              -> allenai/winogrande/winogrande_xl
    mmlu/{dev,val,test}/<subject>_*.csv      -> cais/mmlu/<subject>

Only the splits present in the sources are written: there is, for instance, no
HellaSwag, ARC, PIQA or WinoGrande training split, so few-shot runs of those tasks need
the real hub data (or files you add yourself).

Where the public file is not the form the hub dataset was built from, the result is the
closest honest equivalent, and differs as follows:

* HellaSwag: the only source is llama.cpp's 6-line text form, which joins the context into
  `activity_label: ctx` and already applied its own cleanup (drops [header]/[step]/
  [substeps], turns " [title]" into ". ", collapses double spaces). The hub's `ctx_a` /
  `ctx_b` split is lost. It is rebuilt heuristically: when the context's last sentence
  break (". ", "! ", "? ") is followed by a lower-case letter, that tail is `ctx_b` (the
  unfinished sentence the endings complete, which lm-eval passes through str.capitalize());
  otherwise `ctx_b` is empty. Prompts therefore match lm-eval's for most items but not all,
  and `source_id`, `split_type` are absent.
* WinoGrande: the only source is MosaicML's partial-scoring form (two contexts with the
  option filled in, a shared continuation, gold 0/1). `sentence`/`option1`/`option2` are
  rebuilt by cutting the two contexts at their longest common prefix, moved back to the
  last space (so an option is a whole word); the blank `_` goes there and the continuation
  follows after one space. The prompts lm-eval renders (prefix + option, continuation) are
  the same as from the original; `sentence` itself may differ in the spacing around `_`
  and where the options share a leading word.
* TruthfulQA generation: the CSV's `;`-joined answer lists are split on ";" and stripped,
  as the hub dataset's builder did.
* OpenBookQA: the TSV's "(A) .. (B) .." choice string is split back into text/label lists;
  answer keys are taken as they are.
* BoolQ: labels "true"/"false" become 1/0 (the super_glue ClassLabel); COPA is unchanged.
* PIQA: labels come from the separate labels file, line by line.
* MMLU: headerless CSV rows become {question, subject, choices, answer}, the answer letter
  becoming its index 0-3; the `val` folder is the `validation` split.
* WikiText: pages are cut from the raw test file exactly as EleutherAI's
  wikitext_document_level builder does (a new page at every level-1 ` = Title = ` line).

Usage: `python -m assay.runner.data.importer --from SRC --to DST [--only gsm8k,mmlu]`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assay.errors import UserError
from assay.runner.data.converters import BENCHMARKS


def import_benchmarks(src: Path, dst: Path, only: list[str] | None = None) -> list[str]:
    """Convert the benchmarks found under `src` into `dst`; return the names imported."""
    return list(convert(src, dst, only))


def convert(src: Path, dst: Path, only: list[str] | None = None) -> dict[str, list[Path]]:
    """Convert the benchmarks found under `src` into `dst`; the files written, per benchmark.

    With `only`, exactly those benchmarks are converted and a missing source is an error;
    without it, every known benchmark whose source folder exists is converted.
    """
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise UserError(
            f"Benchmark source folder {src} does not exist; pass the folder that holds gsm8k/, mmlu/, ... ."
        )
    if only is not None:
        unknown = sorted(set(only) - set(BENCHMARKS))
        if unknown:
            raise UserError(f"Unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}.")
        names = [name for name in BENCHMARKS if name in only]
    else:
        names = [name for name, benchmark in BENCHMARKS.items() if (src / benchmark.folder).is_dir()]
        if not names:
            folders = ", ".join(benchmark.folder for benchmark in BENCHMARKS.values())
            raise UserError(f"No benchmark folders found under {src}; expected some of {folders}.")
    return {name: BENCHMARKS[name].convert(src, dst) for name in names}


def sources_help() -> str:
    """Each benchmark and the files it reads under --from, one per line."""
    width = max(map(len, BENCHMARKS))
    return "\n".join(f"  {name:<{width}}  {benchmark.sources}" for name, benchmark in BENCHMARKS.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m assay.runner.data.importer",
        description="Convert public benchmark files into an ASSAY_DATASETS_DIR folder.",
        epilog=f"benchmarks and the files each reads under --from:\n{sources_help()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--from", dest="src", required=True, type=Path, help="raw benchmark files")
    parser.add_argument("--to", dest="dst", required=True, type=Path, help="ASSAY_DATASETS_DIR to write")
    parser.add_argument("--only", help=f"comma-separated subset of: {','.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    try:
        names = import_benchmarks(args.src, args.dst, only)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    print(f"imported {', '.join(names)} into {args.dst}; set ASSAY_DATASETS_DIR={args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
