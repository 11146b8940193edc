"""The command line becomes the run's one options record, `EvalOptions`, in one place.

`RunFlags.run_options` maps `assay run`'s flags onto the record, as `Evaluation.run_options`
maps a spec. Every field of the record is either reached by a flag (a run given a value
other than the default ends with another value there) or named below as none of the command
line's: a field added to `EvalOptions` that no flag reaches fails here, naming it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from assay import cli, run_flags
from assay.batch_size import BatchSize
from assay.errors import UsageError
from assay.run_options import EvalOptions

NOT_THE_COMMAND_LINES = {
    "bootstrap_iters": "lm-eval's `run` has no flag for it (simple_evaluate and spec.bootstrapIters set it)",
    "score_records": "the runner Job's scores_ files, which make a finished Evaluation a baseline",
}


def _options(*argv: str) -> EvalOptions:
    parser = cli.build_parser()
    return run_flags.resolve_run_config(parser.parse_args(["run", *argv])).run_options()


def test_every_field_of_the_record_is_reached_by_a_flag(tmp_path: Path) -> None:
    everything = _options(
        *("--model", "dummy", "--model_args", "pretrained=m", "--tasks", "a", "--num_fewshot", "3"),
        *("--batch_size", "4", "--max_batch_size", "8", "--device", "cpu", "--use_cache", str(tmp_path / "c")),
        *("--cache_requests", "refresh", "--limit", "5", "--check_integrity", "--write_out", "--predict_only"),
        *("--output_path", str(tmp_path / "out"), "--system_instruction", "Be brief.", "--apply_chat_template"),
        *("--fewshot_as_multiturn", "false", "--gen_kwargs", "temperature=0", "--seed", "1,2,3,4"),
        *("--confirm_run_unsafe_code", "--metadata", "k=v", "--include_path", str(tmp_path), "--sentinels", "off"),
    )
    others = _options(
        *("--tasks", "a", "--samples", '{"a": [0]}', "--cache_requests", "delete", "--stop-early"),
        *("--target-ci", "0.1"),
    )
    default = EvalOptions()
    unreached = {
        field.name
        for field in dataclasses.fields(EvalOptions)
        if getattr(everything, field.name) == getattr(default, field.name)
        and getattr(others, field.name) == getattr(default, field.name)
    }
    assert unreached == set(NOT_THE_COMMAND_LINES)
    assert everything.parsed_model_args == {"pretrained": "m"} and everything.tasks == ("a",)
    assert (everything.random_seed, everything.fewshot_random_seed, everything.fewshot_as_multiturn) == (1, 4, False)


def test_each_reader_reads_a_flag_of_the_record() -> None:
    assert set(run_flags._READERS) <= {field.name for field in dataclasses.fields(run_flags.RunFlags)}


def test_a_value_from_the_config_file_is_read_as_the_same_value_on_the_command_line_is(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("tasks: a,b\nbatch_size: '8'\nseed: 3\nlog_samples: 'no'\ngen_kwargs: temperature=0\n")
    from_file = _options("--config", str(config))
    typed = _options(*("--tasks", "a,b", "--batch_size", "8", "--seed", "3", "--gen_kwargs", "temperature=0"))
    assert from_file == typed
    # the command line wins over the file, and a value the file gives is refused as the flag's would be
    assert _options("--config", str(config), "--batch_size", "2").batch_size == BatchSize.parse("2")
    config.write_text("tasks: [a]\nbatch_size: '08'\n")
    with pytest.raises(UsageError, match="--batch_size"):
        _options("--config", str(config))
