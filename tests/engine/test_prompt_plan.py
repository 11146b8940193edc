"""One frozen plan per task decides its prompts: shots, few-shot seed, generation kwargs, rendering.

`evaluator.configure_tasks` makes it once from the run's options and the task's config and
gives it to the task's prompt builder, which reads nothing else of the run: the requests are
built from the plan alone, with no count of shots handed back in, and the config stays as
its YAML says (tests/engine/test_run_overrides.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from assay.run_options import EvalOptions
from assay.runner import evaluator
from assay.runner.tasks.index import LoadedTasks, TaskManager
from assay.runner.tasks.overrides import RunOverrides
from assay.runner.tasks.prompt_plan import PromptPlan, PromptSettings, plan_prompts


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedTasks:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"q": "question {i}", "a": "answer {i}"}}\n' for i in range(12)))
    common = (
        f"dataset_path: json\ndataset_kwargs: {{data_files: {{test: {data}}}}}\ntest_split: test\nfewshot_split: test\n"
        "doc_to_text: '{{q}}'\n"
    )
    (tmp_path / "gen.yaml").write_text(
        common + "task: gen\ndoc_to_target: a\ngeneration_kwargs: {until: ['Q:'], max_gen_toks: 8}\n"
    )
    (tmp_path / "zero.yaml").write_text(
        common + "task: zero\ndoc_to_target: a\nnum_fewshot: 0\noutput_type: loglikelihood\n"
    )
    (tmp_path / "mc.yaml").write_text(
        common + "task: mc\noutput_type: multiple_choice\ndoc_to_choice: ['answer 0', 'answer 1']\n"
        "doc_to_target: 0\nmetric_list: [{metric: acc}, {metric: acc_mutual_info}]\n"
    )
    return TaskManager(str(tmp_path), include_defaults=False).load(["gen", "zero", "mc"])


def _prompts(loaded: LoadedTasks, name: str, docs: int = 4) -> list[str]:
    task = loaded.tasks[name]
    chosen = task.selected_docs(limit=docs, samples=None)
    return [str(instances[0].args[0]) for instances in task.build_requests(chosen)]


def test_the_plan_is_decided_from_the_run_and_the_tasks_config(loaded: LoadedTasks) -> None:
    gen, zero, mc = (loaded.tasks[name] for name in ("gen", "zero", "mc"))
    overrides = RunOverrides(num_fewshot=3, gen_kwargs={"max_gen_toks": 2}, fewshot_seed=5)
    settings = PromptSettings(system_instruction="Be brief.")
    plan = plan_prompts(gen.config, overrides, settings, mutual_info=False)
    assert plan == PromptPlan(
        num_fewshot=3,
        fewshot_seed=5,
        generation_kwargs={"until": ["Q:"], "max_gen_toks": 2},
        unconditioned=False,
        settings=settings,
    )
    # a config that fixes 0 shots keeps 0; --gen_kwargs reach generate_until tasks only
    assert plan_prompts(zero.config, overrides, settings, mutual_info=False).num_fewshot == 0
    assert (
        plan_prompts(mc.config, overrides, settings, mutual_info=True).generation_kwargs == mc.config.generation_kwargs
    )
    # acc_mutual_info asks for each choice without its context, unless nothing is scored
    assert plan_prompts(mc.config, overrides, settings, mutual_info=True).unconditioned
    assert not plan_prompts(
        mc.config, dataclasses.replace(overrides, predict_only=True), settings, mutual_info=True
    ).unconditioned
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.num_fewshot = 1  # type: ignore[misc]


def test_the_builder_follows_the_plan_configure_tasks_gives_it(loaded: LoadedTasks) -> None:
    assert (
        loaded.tasks["mc"].prompt_plan.unconditioned and loaded.tasks["gen"].prompt_plan.num_fewshot == 0
    )  # no run yet
    zero_shot = _prompts(loaded, "gen")
    assert zero_shot == [f"question {i}" for i in range(4)]

    options = EvalOptions(tasks=("gen", "zero", "mc"), num_fewshot=2, fewshot_random_seed=11, system_instruction="S.")
    evaluator.configure_tasks(loaded, options)
    gen = loaded.tasks["gen"]
    assert gen.prompt_plan.num_fewshot == 2 and gen.prompt_plan.settings.system_instruction == "S."
    two_shot = _prompts(loaded, "gen")
    for i, prompt in enumerate(two_shot):
        assert prompt.startswith("S.") and prompt.endswith(f"question {i}")
        assert prompt.count("question ") == 3 and prompt.count("answer ") == 2  # two examples, then the question
    assert all(prompt.count("question ") == 1 for prompt in _prompts(loaded, "zero"))  # fixed at 0 shots

    # The same plan again draws the same examples: the few-shot draws start from the plan's seed.
    evaluator.configure_tasks(loaded, options)
    assert _prompts(loaded, "gen") == two_shot
    evaluator.configure_tasks(loaded, dataclasses.replace(options, fewshot_random_seed=12))
    assert _prompts(loaded, "gen") != two_shot


def test_a_chat_template_is_the_models_and_only_when_asked_for(loaded: LoadedTasks) -> None:
    def template(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + ("|assistant:" * add_generation_prompt)

    evaluator.configure_tasks(loaded, EvalOptions(tasks=("gen",)), chat_template=template)
    assert not loaded.tasks["gen"].prompt_plan.chat and _prompts(loaded, "gen", 1) == ["question 0"]
    evaluator.configure_tasks(
        loaded,
        EvalOptions(tasks=("gen",), apply_chat_template=True, fewshot_as_multiturn=False),
        chat_template=template,
    )
    assert loaded.tasks["gen"].prompt_plan.chat and _prompts(loaded, "gen", 1) == ["user:question 0|assistant:"]
    with pytest.raises(ValueError, match="chat template"):
        evaluator.configure_tasks(loaded, EvalOptions(tasks=("gen",), apply_chat_template=True))
