"""A run's overrides (--num_fewshot, --gen_kwargs, --predict_only, the few-shot seed) leave every
task's config as its YAML says: they are applied where requests and scores are made, and the
dumped config reports them as lm-eval's mutated config does."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from assay.run_options import EvalOptions
from assay.runner import evaluator
from assay.runner.tasks.index import TaskManager


@pytest.fixture
def loaded(tmp_path: Path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"q": "q{i}", "a": "a{i}"}}\n' for i in range(6)))
    common = (
        f"dataset_path: json\ndataset_kwargs: {{data_files: {{test: {data}}}}}\ntest_split: test\nfewshot_split: test\n"
    )
    (tmp_path / "gen.yaml").write_text(
        common + "task: gen\ndoc_to_text: '{{q}}'\ndoc_to_target: a\n"
        "generation_kwargs: {until: ['Q:'], max_gen_toks: 8}\n"
    )
    (tmp_path / "zero.yaml").write_text(
        common + "task: zero\nnum_fewshot: 0\noutput_type: loglikelihood\ndoc_to_text: '{{q}}'\ndoc_to_target: a\n"
    )
    return TaskManager(str(tmp_path), include_defaults=False).load(["gen", "zero"])


def test_overrides_leave_the_configs_as_loaded(loaded) -> None:
    before = {name: copy.deepcopy(dataclasses.asdict(task.config)) for name, task in loaded.tasks.items()}
    options = EvalOptions(
        tasks=("gen", "zero"),
        num_fewshot=2,
        gen_kwargs={"max_gen_toks": 3},
        predict_only=True,
        log_samples=True,
        fewshot_random_seed=7,
    )
    evaluator.configure_tasks(loaded, options)
    assert {name: dataclasses.asdict(task.config) for name, task in loaded.tasks.items()} == before
    gen, zero = loaded.tasks["gen"], loaded.tasks["zero"]
    assert (gen.num_fewshot, zero.num_fewshot) == (2, 0)  # a config that fixes 0 keeps it
    # What lm-eval's config says after its evaluator wrote the overrides in.
    dumped = gen.dump_config()
    assert dumped["num_fewshot"] == 2 and dumped["metric_list"] == [{"metric": "bypass"}]
    assert dumped["generation_kwargs"] == {"until": ["Q:"], "max_gen_toks": 3}
    assert list(dumped).index("num_fewshot") < list(dumped).index("metric_list")  # in the config's field order
    assert zero.dump_config()["num_fewshot"] == 0 and "generation_kwargs" not in zero.dump_config()
    ((doc_id, doc),) = gen.selected_docs(limit=1, samples=None)
    (request,) = gen.build_requests([(doc_id, doc)])[0]
    assert request.request.gen_kwargs == {"until": ["Q:"], "max_gen_toks": 3}  # type: ignore[union-attr]
    assert set(gen.metrics.fns) == {"bypass"} and gen.prompt_plan.fewshot_seed == 7


def test_a_task_no_run_configured_dumps_its_own_config(loaded) -> None:
    gen = loaded.tasks["gen"]
    assert gen.dump_config() == gen.config.to_dict() and "num_fewshot" not in gen.dump_config()
    assert gen.num_fewshot == 0
