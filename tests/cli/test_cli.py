"""`assay` command line: lm-eval's `run` flags parsed as lm-eval parses them, errors as one
sentence with the right exit code, `ls`/`validate`, delegation, and an end-to-end run.

The reference is lm-eval's own parser and EvaluatorConfig on the same argv.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lm_eval._cli.harness import HarnessCLI
from lm_eval.config.evaluate_config import EvaluatorConfig
from lm_eval.utils import make_table as lm_make_table

from assay import cli
from assay.run_results import RunResults
from assay.runner.results.table import make_table
from tests.helpers import copy_tasks

REPO = Path(__file__).resolve().parents[2]

COMPARED = [
    "model",
    "model_args",
    "tasks",
    "num_fewshot",
    "batch_size",
    "max_batch_size",
    "device",
    "limit",
    "samples",
    "use_cache",
    "cache_requests",
    "check_integrity",
    "write_out",
    "log_samples",
    "output_path",
    "predict_only",
    "system_instruction",
    "apply_chat_template",
    "fewshot_as_multiturn",
    "show_config",
    "include_path",
    "gen_kwargs",
    "verbosity",
    "wandb_args",
    "wandb_config_args",
    "hf_hub_log_args",
    "seed",
    "trust_remote_code",
    "confirm_run_unsafe_code",
    "metadata",
]

ARGVS = [
    ["run", "--tasks", "hellaswag"],
    ["run", "-t", "a,b", "c", "-t", "d", "--model", "dummy"],
    ["run", "-M", "hf", "-a", "pretrained=gpt2,dtype=float32", "max_length=128", "--tasks", "x"],
    ["run", "--model_args", '{"pretrained": "gpt2", "chat_template_args": {"effort": "low"}}', "--tasks", "x"],
    ["run", "--model_args", "pretrained=gpt2", "--model_args", "revision=main,trust=True", "--tasks", "x"],
    ["run", "--tasks", "x", "--limit", "0.5", "-f", "5", "-b", "auto:4", "--max_batch_size", "32", "--device", "cpu"],
    ["run", "--tasks", "x", "-L", "10", "-b", "8", "-c", "/tmp/cache", "--cache_requests"],
    ["run", "--tasks", "x", "--cache_requests", "refresh", "--check_integrity", "-w", "--show_config"],
    ["run", "--tasks", "x", "--cache_requests", "delete", "-v", "debug"],
    ["run", "--tasks", "x", "-o", "out", "-s", "--system_instruction", "Be brief."],
    ["run", "--tasks", "x", "-o", "out", "-x"],
    ["run", "--tasks", "x", "--apply_chat_template"],
    ["run", "--tasks", "x", "--apply_chat_template", "tool_use", "--fewshot_as_multiturn", "false"],
    ["run", "--tasks", "x", "--apply_chat_template", "--fewshot_as_multiturn"],
    ["run", "--tasks", "x", "--gen_kwargs", "temperature=0,top_p=0.9", "max_gen_toks=16", 'until=["\\n\\n","Q:"]'],
    ["run", "--tasks", "x", "--samples", '{"x": [0, 2, 5]}'],
    ["run", "--tasks", "x", "--seed", "42"],
    ["run", "--tasks", "x", "--seed", "0,None,8,52"],
    ["run", "--tasks", "x", "--seed", "1,2,3"],
    ["run", "--tasks", "x", "--trust_remote_code", "--confirm_run_unsafe_code", "-a", "pretrained=gpt2"],
    ["run", "--tasks", "x", "--metadata", "max_seq_lengths=[4096,8192]", "tokenizer=gpt2", "-a", "pretrained=gpt2"],
    ["run", "--tasks", "x", "--metadata", '{"tokenizer": "gpt2"}', "--include_path", "/tmp"],
    ["run", "--tasks", "x", "--wandb_args", "project=p,mode=offline", "--wandb_config_args", "a=1"],
    ["run", "--tasks", "x", "--hf_hub_log_args", "hub_results_org=me,push_results_to_hub=True", "details_repo_name=d"],
    ["--model", "dummy", "--tasks", "x"],  # legacy form
    ["-t", "x", "-f", "0", "--limit", "1"],
]


def lm_eval_config(argv: list[str]) -> dict:
    harness = HarnessCLI()
    choices = harness._subparsers.choices
    if len(argv) > 1 and argv[0] not in choices:
        argv = ["run", *argv]
    namespace = harness._parser.parse_args(argv)
    config = EvaluatorConfig.from_cli(namespace)
    resolved = {key: getattr(config, key) for key in COMPARED}
    if namespace.device is None:
        resolved["device"] = None  # deliberate: lm-eval's default "cuda:0"; Assay lets the backend choose
    return resolved


def assay_config(argv: list[str]) -> dict:
    parser = cli.build_parser()
    args = parser.parse_args(cli.normalize_argv(argv, parser))
    flags = cli.resolve_run_config(args)
    # the batch size arrives parsed; lm-eval's config holds it as written
    return {key: getattr(flags, key) for key in COMPARED} | {"batch_size": flags.batch_size.given}


@pytest.mark.parametrize("argv", ARGVS, ids=[" ".join(a) for a in ARGVS])
def test_run_flags_resolve_like_lm_eval(argv, monkeypatch):
    monkeypatch.delenv("HF_DATASETS_TRUST_REMOTE_CODE", raising=False)
    expected = lm_eval_config(list(argv))
    assert assay_config(list(argv)) == expected


def test_yaml_config_precedence_like_lm_eval(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        textwrap.dedent("""
        model: dummy
        model_args: pretrained=gpt2,dtype=float32
        tasks: [hellaswag, arc_easy]
        num_fewshot: 3
        batch_size: 4
        seed: 7
        gen_kwargs: {temperature: 0}
    """)
    )
    for argv in (
        ["run", "--config", str(config)],
        ["run", "-C", str(config), "--num_fewshot", "0", "-t", "piqa", "-b", "2"],
    ):
        assert assay_config(argv) == lm_eval_config(argv)


def test_samples_from_file(tmp_path):
    path = tmp_path / "samples.json"
    path.write_text('{"x": [1, 2]}')
    argv = ["run", "--tasks", "x", "-E", str(path)]
    assert assay_config(argv)["samples"] == lm_eval_config(argv)["samples"] == {"x": [1, 2]}


def test_every_lm_eval_run_flag_exists_with_help():
    lm_run = HarnessCLI()._subparsers.choices["run"]
    ours = cli._subcommands(cli.build_parser())["run"]
    our_actions = {opt: action for action in ours._actions for opt in action.option_strings}
    for action in lm_run._actions:
        for option in action.option_strings:
            assert option in our_actions, option
            mine = our_actions[option]
            assert mine.dest == action.dest and mine.nargs == action.nargs and mine.const == action.const, option
            assert mine.default == action.default, option
            assert mine.help, option


def run_main(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv,code,fragment",
    [
        (["run", "--tasks", "x", "--log_samples"], 2, "--output_path"),
        (["run", "--tasks", "x", "--predict_only"], 2, "--output_path"),
        (["run", "--tasks", "x", "--fewshot_as_multiturn"], 2, "--apply_chat_template"),
        (["run", "--tasks", "x", "--limit", "3", "--samples", '{"x": [0]}'], 2, "--samples"),
        (["run", "--tasks", "x", "--samples", "{bad json"], 2, "JSON"),
        (["run", "--tasks", "x", "--samples", "no_such_file.json"], 2, "--samples"),
        (["run", "--tasks", "x", "--seed", "1,2"], 2, "--seed"),
        (["run", "--tasks", "x", "--seed", "a"], 2, "--seed"),
        (["run", "--tasks", "x", "--batch_size", "big"], 2, "--batch_size"),
        (["run", "--tasks", "x", "--cache_requests", "maybe"], 2, "--cache_requests"),
        (["run", "--tasks", "x", "--model_args", "pretrained"], 2, "key=value"),
        (["run", "--tasks", "x", "--model_args", "{not json"], 2, "JSON"),
        (["run", "--tasks", "x", "--limit", "ten"], 2, "--limit"),
        (["run", "--tasks", "x", "--limit", "0"], 2, "--limit 0 is not above 0"),
        (["run", "--tasks", "x", "--limit", "-3"], 2, "--limit -3 is not above 0"),
        (["run", "--tasks", "x", "--num_fewshot", "-1"], 2, "--num_fewshot -1 is not a count"),
        (["run", "--tasks", "x", "--no_such_flag"], 2, "--no_such_flag"),
        (["run", "--tasks", "x", "--trackio_args", "project=p"], 2, "not supported"),
        (["run", "--model", "dummy"], 2, "--tasks"),
        (["run", "--config", "missing.yaml", "--tasks", "x"], 2, "missing.yaml"),
        (["ls", "nothing"], 2, "invalid choice"),
        (["validate"], 2, "--tasks"),
        (["run", "--model", "dummy", "--tasks", "no_such_task_anywhere"], 1, "no_such_task_anywhere"),
        (["run", "--model", "nope", "--tasks", "hellaswag"], 2, "nope"),
        (["data", "import", "--from", "/no/such/dir", "--to", "/tmp/x"], 1, "/no/such/dir"),
    ],
)
def test_bad_input_is_one_sentence(argv, code, fragment, capsys):
    got, out, err = run_main(argv, capsys)
    assert got == code
    assert fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_counts_lm_eval_would_run_silently_are_refused_from_a_config_file_too(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("tasks: [x]\nlimit: 0\n")
    code, _, err = run_main(["run", "-C", str(config)], capsys)
    assert code == 2 and "--limit 0 is not above 0" in err and err.count("\n") == 1
    config.write_text("tasks: [x]\nnum_fewshot: 1.5\n")
    assert run_main(["run", "-C", str(config)], capsys)[0] == 2
    # A float below 1 is a fraction of the documents, as in lm-eval; 1.0 and above a count.
    for limit in ("0.5", "1", "1.0", "10"):
        assert assay_config(["run", "--tasks", "x", "--limit", limit])["limit"] == float(limit)
    assert assay_config(["run", "--tasks", "x", "--num_fewshot", "0"])["num_fewshot"] == 0


@pytest.mark.parametrize(
    "target,why", [("a_file/out", "(Not a directory)"), ("a_file/run.json", "a_file is a file, not a folder")]
)
def test_an_unwritable_output_path_fails_before_the_model_loads(target, why, tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    path = tmp_path / target
    # Had the model been loaded first, the error would name its missing path instead.
    argv = [
        "run",
        "--model",
        "hf",
        "--model_args",
        "pretrained=/no/such/model",
        "--tasks",
        "x",
        "--output_path",
        str(path),
    ]
    code, _, err = run_main(argv, capsys)
    assert code == 1
    assert f"Cannot write to --output_path {path} (" in err and why in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_write_check_leaves_nothing_behind(tmp_path):
    from assay.runner.results import output

    output.check_writable(tmp_path / "new" / "deeper", name="--output_path")
    output.check_writable(tmp_path / "res" / "run.json", name="--output_path")
    assert list((tmp_path / "new" / "deeper").iterdir()) == [] and list((tmp_path / "res").iterdir()) == []


def test_bad_yaml_config(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    code, _, err = run_main(["run", "-C", str(bad), "--tasks", "x"], capsys)
    assert code == 2 and "not valid YAML" in err and err.count("\n") == 1


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "assay", "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("run", "ls", "validate", "apply", "operator", "runner", "data"):
        assert f"    {command}" in out


def test_run_help_and_bare_run(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--tasks", "--model_args", "--hf_hub_log_args", "--confirm_run_unsafe_code", "--seed"):
        assert flag in text
    assert cli.main(["run"]) == 0
    assert "--output_path" in capsys.readouterr().out


def test_no_arguments_prints_help(capsys):
    assert cli.main([]) == 0
    assert "COMMAND" in capsys.readouterr().out


@pytest.fixture()
def task_dir(tmp_path):
    """A tiny local multiple-choice task (JSON data made here)."""
    data = tmp_path / "data.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"q": f"{i}+{i}", "choices": [str(2 * i), str(2 * i + 1)], "label": i % 2}) for i in range(4)
        )
        + "\n"
    )
    folder = copy_tasks("cli", tmp_path / "tasks", work=tmp_path)
    return folder


def test_ls_lists_include_path_tasks(task_dir, capsys):
    code, out, _ = run_main(["ls", "tasks", "--include_path", str(task_dir)], capsys)
    assert code == 0
    assert out.startswith("\n|")
    headers = [line.replace(" ", "") for line in out.splitlines() if line.startswith("|") and "-" not in line[:3]]
    assert {"|Group|ConfigLocation|", "|Tag|", "|Task|ConfigLocation|OutputType|"} <= set(headers)
    assert "|tiny_mc" in out and "multiple_choice" in out and str(task_dir / "tiny.yaml") in out
    code, out, _ = run_main(["ls", "groups", "--include_path", str(task_dir)], capsys)
    assert "tiny_group" in out and "tiny_mc" not in out
    code, out, _ = run_main(["ls", "tags", "--include_path", str(task_dir)], capsys)
    assert "tiny_tag" in out and "Config Location" not in out


def test_ls_and_validate_do_not_import_heavy_modules(task_dir):
    script = textwrap.dedent(f"""
        import sys
        from assay.cli import main
        assert main(["ls", "tasks", "--include_path", {str(task_dir)!r}]) == 0
        assert main(["validate", "--tasks", "tiny_mc", "--include_path", {str(task_dir)!r}]) == 0
        heavy = sorted(m for m in ("torch", "transformers", "datasets", "assay.runner.evaluator") if m in sys.modules)
        assert not heavy, heavy
    """)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, cwd=REPO)


def test_validate(task_dir, capsys):
    code, out, _ = run_main(["validate", "--tasks", "tiny_mc,tiny_group", "--include_path", str(task_dir)], capsys)
    assert code == 0 and out.splitlines() == [
        "Validating tasks: ['tiny_mc', 'tiny_group']",
        "All tasks found and valid",
    ]
    code, out, _ = run_main(["validate", "--tasks", "tiny_mc,tiny_mcc", "--include_path", str(task_dir)], capsys)
    assert code == 1 and out.splitlines() == [
        "Validating tasks: ['tiny_mc', 'tiny_mcc']",
        "Unknown task 'tiny_mcc'. Did you mean tiny_mc, tiny_tag? Run `assay ls tasks` to see the names, or add --include_path for your own YAMLs.",
        "1 problem found.",
    ]


def test_delegated_subcommands_get_their_argv(monkeypatch):
    import types

    seen = {}
    for name, (module, _) in cli.DELEGATED.items():
        fake = types.ModuleType(module)
        fake.main = lambda argv, name=name: seen.setdefault(name, argv) and 0
        monkeypatch.setitem(sys.modules, module, fake)
    assert cli.main(["apply", "-f", "eval.yaml", "--local"]) == 0
    assert cli.main(["operator", "--verbose"]) == 0
    assert cli.main(["runner", "--spec", "x"]) == 0
    assert seen == {"apply": ["-f", "eval.yaml", "--local"], "operator": ["--verbose"], "runner": ["--spec", "x"]}


def test_data_import_says_which_tasks_it_built_from_which_files(shared_data, tmp_path, capsys):
    dst = tmp_path / "d"
    code, out, _ = run_main(
        ["data", "import", "--from", str(shared_data), "--to", str(dst), "--only", "lambada,arc"], capsys
    )
    assert code == 0
    assert out.splitlines() == [
        "arc: arc/ARC-{Easy,Challenge}-{Test,Dev}.jsonl -> allenai/ai2_arc/ARC-Challenge, allenai/ai2_arc/ARC-Easy; "
        "tasks: arc_challenge, arc_easy",
        "lambada: lambada/lambada_test.jsonl -> EleutherAI/lambada_openai/default; tasks: lambada_openai",
        "not built by `assay data import` (their data comes from the Hugging Face hub): lambada_standard (cimec/lambada), "
        "sciq (allenai/sciq)",
        f"imported arc, lambada into {dst}; set ASSAY_DATASETS_DIR={dst}",
    ]
    with pytest.raises(SystemExit):
        cli.main(["data", "import", "--help"])
    assert "  mmlu        mmlu/{dev,val,test}/<subject>_{dev,val,test}.csv\n" in capsys.readouterr().out


def test_run_end_to_end_writes_lm_eval_files_and_prints_tables(task_dir, tmp_path, capsys):
    out_dir = tmp_path / "out"
    argv = [
        "run",
        "--model",
        "dummy",
        "--tasks",
        "tiny_group",
        "--include_path",
        str(task_dir),
        "--output_path",
        str(out_dir),
        "--log_samples",
        "--seed",
        "3",
    ]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    results_files = list(out_dir.glob("*/results_*.json"))
    assert len(results_files) == 1
    results = json.loads(results_files[0].read_text())
    folder = results_files[0].parent
    date_id = results_files[0].stem[len("results_") :]
    assert folder.name == results["model_name_sanitized"]
    assert (folder / f"samples_tiny_mc_{date_id}.jsonl").is_file()
    assert list(results)[-9:] == [
        "model_source",
        "model_name",
        "model_name_sanitized",
        "system_instruction",
        "system_instruction_sha",
        "fewshot_as_multiturn",
        "chat_template",
        "chat_template_sha",
        "total_evaluation_time_seconds",
    ]
    assert set(results["task_hashes"]) == {"tiny_mc"}
    config = cli.resolve_run_config(cli.build_parser().parse_args(argv))
    expected = (
        "\n".join(
            [
                cli.summary_line(config, results["config"]["batch_sizes"]),
                lm_make_table(results),
                lm_make_table(results, "groups"),
            ]
        )
        + "\n"
    )
    assert out == expected
    assert out.splitlines()[0] == "dummy ({}), gen_kwargs: ({}), limit: None, num_fewshot: None, batch_size: 1"
    assert make_table(RunResults.from_lmeval_dict(results)) == lm_make_table(results)


def test_run_json_output_path_and_show_config(task_dir, tmp_path, capsys):
    target = tmp_path / "res" / "run.json"
    code, out, err = run_main(
        [
            "--model",
            "dummy",
            "-t",
            "tiny_mc",
            "--include_path",
            str(task_dir),
            "-o",
            str(target),
            "--show_config",
            "--limit",
            "2",
            "-a",
            "pretrained=my/model",
        ],
        capsys,
    )
    assert code == 0, err
    (written,) = list(target.parent.glob("run_*.json"))
    results = json.loads(written.read_text())
    assert results["model_name"] == "my/model" and results["config"]["limit"] == 2.0
    shown = out.split("\ndummy (")[0]
    assert json.loads(shown)["results"] == results["results"]
    assert "dummy ({'pretrained': 'my/model'}), gen_kwargs: ({}), limit: 2.0, num_fewshot: None, batch_size: 1" in out


def test_switches_in_a_config_file_are_read_as_model_args_are(tmp_path, capsys):
    """`trust_remote_code: "no"` in a --config YAML was bool("no"): the model repository's code ran."""
    config = tmp_path / "run.yaml"
    config.write_text('tasks: [x]\ntrust_remote_code: "no"\nlog_samples: "No"\n')
    flags = cli.resolve_run_config(cli.build_parser().parse_args(["run", "-C", str(config)]))
    assert (
        flags.trust_remote_code is False and flags.log_samples is False and "trust_remote_code" not in flags.model_args
    )
    config.write_text('tasks: [x]\ntrust_remote_code: "on"\n')
    code, _, err = run_main(["run", "-C", str(config)], capsys)
    assert code == 2 and "--trust_remote_code must be true or false" in err and err.count("\n") == 1


def test_model_args_trust_remote_code_on_is_refused_before_the_model_loads(task_dir, tmp_path, capsys):
    """An existing (empty) folder passes the location check: the refusal comes before any load."""
    args = f"pretrained={tmp_path},trust_remote_code=on"
    argv = ["run", "--model", "hf", "--model_args", args, "-t", "tiny_mc", "--include_path", str(task_dir)]
    code, _, err = run_main(argv, capsys)
    assert code != 0 and "model_args trust_remote_code must be true or false" in err
    assert err.count("\n") == 1 and "Traceback" not in err
