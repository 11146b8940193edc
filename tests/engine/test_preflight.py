"""Preflight: inputs that cannot work fail before the model loads, as one sentence.

Each case runs a real entry point (`assay run`, the runner pod, its `--check`) with
`evaluator.build_lm` replaced by a tripwire, so an error that came after the model was
built fails the test. The caches are real: a datasets cache written by `datasets` itself
and a hub cache in huggingface_hub's layout, each cross-checked against the library that
reads it offline, so the checks refuse exactly what those libraries could not load.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import huggingface_hub.constants
import pytest

from assay import cli
from assay.errors import UserError
from assay.runner import evaluator, job, models
from assay.runner.checks import hub_reach, preflight
from assay.runner.tasks.index import TaskManager

HUB_DATASET, CONFIG = "assay-test/tiny_qa", "easy"
ROWS = [{"q": f"{i}+{i}", "choices": [str(2 * i), str(2 * i + 1)], "label": i % 2} for i in range(4)]
MC_TASK = (
    "test_split: test\noutput_type: multiple_choice\ndoc_to_text: 'Q: {{q}}\\nA:'\ndoc_to_choice: '{{choices}}'\n"
    "doc_to_target: label\nmetric_list:\n  - metric: acc\n"
)


@pytest.fixture()
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE and HF_DATASETS_OFFLINE as the libraries read them (at import) and as named."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("ASSAY_DATASETS_DIR", raising=False)


@pytest.fixture()
def built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every model the evaluator builds; a build is an error here (the checks come first)."""
    models: list[Any] = []

    def tripwire(options: Any) -> Any:
        models.append(options.model)
        raise AssertionError(f"the model {options.model!r} was built before the input was checked")

    monkeypatch.setattr(evaluator, "build_lm", tripwire)
    return models


@pytest.fixture()
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline mode off, as the libraries read it; the hub's reachability asked afresh."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "ASSAY_DATASETS_DIR"):
        monkeypatch.delenv(name, raising=False)
    hub_reach._probe.cache_clear()


class _Hub(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def reachable_hub(online: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real HTTP server on this machine standing in for the hub (HF_ENDPOINT), which tests cannot reach."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture()
def unreachable_hub(online: None, monkeypatch: pytest.MonkeyPatch) -> str:
    """HF_ENDPOINT at a port of this machine where nothing listens: connections are refused, as without a network."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", url)
    return url


@pytest.fixture(scope="module")
def dataset_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets cache holding HUB_DATASET's config CONFIG, prepared by `datasets` as a hub download leaves it."""
    from datasets.packaged_modules.json.json import Json

    root = tmp_path_factory.mktemp("datasets_cache")
    source = root / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    org, name = HUB_DATASET.split("/")
    builder = Json(
        cache_dir=str(root / "cache"),
        dataset_name=name,
        config_name=CONFIG,
        config_id=CONFIG,
        hash="0123abcd",
        data_files={"test": str(source)},
    )
    builder.download_and_prepare()
    shutil.move(root / "cache" / name, root / "cache" / f"{org}___{name}")  # the namespaced folder of a hub id
    return root / "cache"


@pytest.fixture()
def task_dir(tmp_path: Path, dataset_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three tasks: local JSON data, the cached hub dataset, and a hub dataset that is nowhere.

    Written so that a runner pod takes them too, where the include path is a tenant's (`job.main`
    sets ASSAY_TASK_CODE): the local data is a folder inside ASSAY_DATASETS_DIR, and the datasets
    cache is the admin's (HF_DATASETS_CACHE), not the task's `cache_dir`."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    local_data = tmp_path / "datasets" / "pf_local"
    local_data.mkdir(parents=True)
    (local_data / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "datasets"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", dataset_cache)
    (folder / "local.yaml").write_text(f"task: pf_local\ndataset_path: '{local_data}'\n{MC_TASK}")
    (folder / "cached.yaml").write_text(
        f"task: pf_cached\ndataset_path: {HUB_DATASET}\ndataset_name: {CONFIG}\n{MC_TASK}"
    )
    (folder / "uncached.yaml").write_text(
        f"task: pf_uncached\ndataset_path: {HUB_DATASET}\ndataset_name: hard\n{MC_TASK}"
    )
    return folder


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") <= 1 and "Traceback" not in err
    return code, err


def _pod(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, **spec: Any) -> tuple[int, str]:
    path = tmp_path / "spec.json"
    path.write_text(
        json.dumps({"model": "hf", "modelArgs": {"pretrained": str(tmp_path)}, "tasks": ["pf_local"], **spec})
    )
    code = job.main(["--spec", str(path), *extra])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


# -- (a) the output path --------------------------------------------------------------------


def test_the_pod_and_its_check_refuse_an_output_directory_they_cannot_write(
    task_dir: Path, tmp_path: Path, built: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    target = tmp_path / "a_file" / "out"
    for check in ([], ["--check"]):
        code, err = _pod(tmp_path, capsys, "--include_path", str(task_dir), "--output_dir", str(target), *check)
        assert code == job.EXIT_CONFIG
        assert f"Cannot write to the output directory {target} (Not a directory); check spec.output" in err
    assert built == []


# -- (b) the model path -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg", ["pretrained=/no/such/model", "pretrained=./no/such", "pretrained=org/name/extra", "tokenizer=~/no/tok"]
)
def test_a_missing_model_directory_fails_before_the_model_is_built(
    arg: str, task_dir: Path, tmp_path: Path, built: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    args = arg if arg.startswith("pretrained") else f"pretrained={tmp_path},{arg}"
    code, err = _cli(
        ["run", "--model", "hf", "--model_args", args, "--tasks", "pf_local", "--include_path", str(task_dir)], capsys
    )
    key, _, value = arg.partition("=")
    what = "model" if key == "pretrained" else "tokenizer"
    assert code == 1 and built == []
    assert err == (
        f"assay: error: model_args {key}={value} names a {what} directory that does not exist on this machine; "
        "point it at an existing directory, or give a Hugging Face hub id (org/name).\n"
    )


def test_the_pod_and_its_check_refuse_a_missing_model_directory_with_the_config_exit_code(
    task_dir: Path,
    tmp_path: Path,
    built: list[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        models, "check_backend_installed", lambda name: None
    )  # a vLLM image has vllm; this Python may not
    for check in ([], ["--check"]):
        code, err = _pod(
            tmp_path,
            capsys,
            "--include_path",
            str(task_dir),
            *check,
            model="vllm",
            modelArgs={"pretrained": str(tmp_path), "lora_local_path": "adapters/mine"},
        )
        assert code == job.EXIT_CONFIG == 78
        assert (
            "model_args lora_local_path=adapters/mine names a LoRA adapter directory that does not exist on this machine; "
            "point it at an existing directory." in err
        )
    assert built == []


def _hub_cache(root: Path, repo_id: str, *, branch: str = "main") -> Path:
    """A model repo as huggingface_hub caches it: a ref naming a commit, the commit's snapshot."""
    from transformers import GPT2Config

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / branch).write_text(commit)
    GPT2Config(n_layer=1, n_head=1, n_embd=8).save_pretrained(repo / "snapshots" / commit)
    return root


@pytest.mark.model  # writes a transformers config and loads it as transformers would
def test_an_offline_hub_model_must_be_in_the_cache_exactly_when_transformers_needs_it(
    offline: None, tmp_path: Path
) -> None:
    import transformers

    cache = _hub_cache(tmp_path / "hub", "assay-test/tiny-gpt2")
    args = {"pretrained": "assay-test/tiny-gpt2", "cache_dir": str(cache)}
    preflight.check_model_args("hf", args)
    assert transformers.AutoConfig.from_pretrained("assay-test/tiny-gpt2", cache_dir=cache).n_layer == 1
    for refused in ({**args, "revision": "v2"}, {**args, "pretrained": "assay-test/other"}):
        with pytest.raises(OSError):
            transformers.AutoConfig.from_pretrained(
                refused["pretrained"], cache_dir=cache, revision=refused.get("revision", "main")
            )
        with pytest.raises(UserError, match="not in the local cache"):
            preflight.check_model_args("hf", refused)


def test_an_offline_hub_id_missing_from_the_cache_is_one_sentence(
    offline: None, task_dir: Path, tmp_path: Path, built: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "empty_hub"
    code, err = _cli(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained=assay-test/absent,revision=v1,cache_dir={cache}",
            "--tasks",
            "pf_local",
            "--include_path",
            str(task_dir),
        ],
        capsys,
    )
    assert code == 1 and built == []
    assert err == (
        f"assay: error: model_args pretrained=assay-test/absent names a Hugging Face hub model at revision v1 that is "
        f"not in the local cache {cache}, and HF_HUB_OFFLINE=1 forbids downloading it; download it into that cache "
        "on a connected machine (`hf download assay-test/absent`), set HF_HUB_CACHE to a cache that holds it, "
        "give a local directory, or unset HF_HUB_OFFLINE.\n"
    )


def test_online_a_hub_id_is_left_to_the_hub(reachable_hub: str, tmp_path: Path) -> None:
    preflight.check_model_args("hf", {"pretrained": "assay-test/absent", "cache_dir": str(tmp_path)})
    with pytest.raises(UserError, match="local_files_only=True forbids downloading it; .* or drop local_files_only"):
        preflight.check_model_args(
            "hf", {"pretrained": "assay-test/absent", "cache_dir": str(tmp_path), "local_files_only": True}
        )


def test_a_missing_hub_id_fails_at_once_when_the_hub_is_out_of_reach(
    unreachable_hub: str, task_dir: Path, tmp_path: Path, built: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Not offline, but no network: one sentence before the model loads, not huggingface_hub's five retries."""
    cache = tmp_path / "empty_hub"
    code, err = _cli(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained=assay-test/absent,cache_dir={cache}",
            "--tasks",
            "pf_local",
            "--include_path",
            str(task_dir),
        ],
        capsys,
    )
    assert code == 1 and built == []
    assert err == (
        f"assay: error: model_args pretrained=assay-test/absent names a Hugging Face hub model that is not in the "
        f"local cache {cache}, and the Hugging Face hub ({unreachable_hub}) cannot be reached from this machine "
        "(ConnectError: [Errno 111] Connection refused); download it into that cache on a connected machine "
        "(`hf download assay-test/absent`), set HF_HUB_CACHE to a cache that holds it, give a local directory, "
        "or run where the hub can be reached.\n"
    )


def test_a_hub_that_accepts_but_never_answers_is_out_of_reach_within_the_timeout(online: None) -> None:
    with socket.socket() as silent:  # listens, so connections open, but never accepts nor answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        reason = hub_reach.unreachable(url, timeout=0.3)
    assert reason is not None and reason.startswith(("ReadTimeout", "no answer within 0.3 s")), reason


# -- (c) task names ----------------------------------------------------------------------------


def test_an_unknown_task_fails_before_the_model_is_built_in_the_cli_and_the_pod(
    task_dir: Path, tmp_path: Path, built: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    sentence = "Unknown task 'pf_locl'. Did you mean pf_local? Run `assay ls tasks` to see the names, or add --include_path for your own YAMLs."
    code, err = _cli(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={tmp_path}",
            "--tasks",
            "pf_locl",
            "--include_path",
            str(task_dir),
        ],
        capsys,
    )
    assert code == 1 and err == f"assay: error: {sentence}\n"
    for check in ([], ["--check"]):
        code, err = _pod(tmp_path, capsys, "--include_path", str(task_dir), *check, tasks=["pf_locl"])
        assert code == job.EXIT_CONFIG and sentence in err
    assert built == []


# -- (d) datasets offline ----------------------------------------------------------------------


def test_an_offline_hub_dataset_must_be_cached_exactly_when_datasets_needs_it(
    offline: None, task_dir: Path, dataset_cache: Path
) -> None:
    from assay.runner.data.local import load_task_dataset

    manager = TaskManager(str(task_dir), include_defaults=False)
    preflight.check_datasets(manager.leaf_configs(["pf_local", "pf_cached"]))
    assert load_task_dataset(HUB_DATASET, CONFIG, {"cache_dir": str(dataset_cache)})["test"]["q"] == [
        row["q"] for row in ROWS
    ]
    with pytest.raises(ValueError, match="Couldn't find cache"):
        load_task_dataset(HUB_DATASET, "hard", {"cache_dir": str(dataset_cache)})
    with pytest.raises(UserError, match=r"^Task 'pf_uncached' needs the dataset assay-test/tiny_qa \(config hard\)"):
        preflight.check_datasets(manager.leaf_configs(["pf_cached", "pf_uncached"]))


def test_a_missing_offline_dataset_is_one_sentence_naming_task_dataset_and_fix(
    offline: None,
    task_dir: Path,
    tmp_path: Path,
    dataset_cache: Path,
    built: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _cli(
        [
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={tmp_path}",
            "--tasks",
            "pf_local,pf_uncached",
            "--include_path",
            str(task_dir),
        ],
        capsys,
    )
    assert code == 1 and built == []
    assert err == (
        f"assay: error: Task 'pf_uncached' needs the dataset {HUB_DATASET} (config hard), which is neither under "
        f"ASSAY_DATASETS_DIR ({tmp_path / 'datasets'}) nor in the local datasets cache {dataset_cache}, and HF_DATASETS_OFFLINE=1 "
        f"forbids downloading it; `assay data import` cannot build it: its data comes from the Hugging Face hub, so "
        f"run datasets.load_dataset('{HUB_DATASET}', 'hard') once on a machine that reaches the hub and set "
        "HF_DATASETS_CACHE to a datasets cache that holds it (a copy of that machine's), write its splits yourself "
        f"as {HUB_DATASET}/hard/<split>.jsonl in a folder named by ASSAY_DATASETS_DIR, or unset HF_DATASETS_OFFLINE.\n"
    )
    for check in ([], ["--check"]):
        code, err = _pod(tmp_path, capsys, "--include_path", str(task_dir), *check, tasks=["pf_uncached"])
        assert code == job.EXIT_CONFIG and "Task 'pf_uncached' needs the dataset" in err


def test_library_tasks_served_by_assay_datasets_dir_pass(
    offline: None, shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from assay.runner.data import importer

    configs = TaskManager().leaf_configs(["arc_easy", "arc_challenge"])
    with pytest.raises(
        UserError,
        match=r"^Task 'arc_easy' needs the dataset allenai/ai2_arc \(config ARC-Easy\).*"
        r"\(1 more tasks lack their data too: arc_challenge\)\.$",
    ):
        preflight.check_datasets(configs)
    importer.import_benchmarks(shared_data, tmp_path / "data", ["arc"])
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "data"))
    preflight.check_datasets(configs)


def test_local_and_cached_data_run_to_the_end_offline(
    offline: None, task_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["run", "--model", "dummy", "--tasks", "pf_local,pf_cached", "--include_path", str(task_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "|pf_cached|" in out.replace(" ", "") and "|pf_local|" in out.replace(" ", "")


def test_online_a_missing_dataset_is_left_to_the_hub(reachable_hub: str, task_dir: Path) -> None:
    preflight.check_datasets(TaskManager(str(task_dir), include_defaults=False).leaf_configs(["pf_uncached"]))


def test_a_missing_dataset_fails_at_once_when_the_hub_is_out_of_reach(
    unreachable_hub: str,
    tmp_path: Path,
    built: list[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library task `assay data import` builds: the error names the folder ASSAY_DATASETS_DIR lacks and the import."""
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "no-such-folder"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    code, err = _cli(["run", "--model", "dummy", "--tasks", "arc_easy"], capsys)
    assert code == 1 and built == []
    assert err == (
        f"assay: error: Task 'arc_easy' needs the dataset allenai/ai2_arc (config ARC-Easy), which is neither under "
        f"ASSAY_DATASETS_DIR ({tmp_path / 'no-such-folder'}: no such folder) nor in the local datasets cache "
        f"{tmp_path / 'datasets-cache'}, and the Hugging Face hub ({unreachable_hub}) cannot be reached from this "
        "machine (ConnectError: [Errno 111] Connection refused); set ASSAY_DATASETS_DIR to a folder holding "
        "allenai/ai2_arc/ARC-Easy/<split>.jsonl (`assay data import --from <benchmark files> --to <folder> --only "
        "arc` writes one), set HF_DATASETS_CACHE to a datasets cache that holds it, or run where the hub can be "
        "reached.\n"
    )


@pytest.mark.parametrize(("task", "dataset"), [("sciq", "allenai/sciq"), ("lambada_standard", "cimec/lambada")])
def test_a_task_the_importer_cannot_build_is_told_where_its_data_comes_from(
    offline: None, task: str, dataset: str
) -> None:
    with pytest.raises(UserError) as error:
        preflight.check_datasets(TaskManager().leaf_configs([task]))
    message = str(error.value)
    assert (
        f"`assay data import` cannot build it: its data comes from the Hugging Face hub, so run datasets.load_dataset("
        f"'{dataset}') once on a machine that reaches the hub" in message
    )
    assert "--only" not in message


# -- the whole command, in a fresh process -------------------------------------------------------


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_the_command_fails_without_importing_the_model_backend(tmp_path: Path) -> None:
    """Before the model loads means before transformers and the hf backend are even imported."""
    program = (
        "import sys; from assay import cli\n"
        "code = cli.main(['run', '--model', 'hf', '--model_args', 'pretrained=/no/such/model', '--tasks', 'arc_easy'])\n"
        "print(code, sorted(m for m in ('transformers', 'assay.runner.models.hf') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.stdout == "1 []\n", done.stderr
    assert done.stderr.startswith("assay: error: model_args pretrained=/no/such/model names a model directory")
