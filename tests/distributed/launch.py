"""Entry point for the distributed tests: registers the test LM, then runs Assay's CLI or runner.

    python -m torch.distributed.run --nproc_per_node=2 tests/distributed/launch.py runner --spec S
    python -m torch.distributed.run --nproc_per_node=2 tests/distributed/launch.py run --model assay-test ...

The test LM is the hash-defined AssayFakeLM (tests/engine/fake_lm.py); a stand-in for a
neural model where the point is the distribution of work, not the model. Environment
variables make it observable and breakable:

- ASSAY_TEST_CALL_LOG=PREFIX: each computed request's cache key is appended to
  PREFIX.rank{r} (what the model was asked to compute, after any --use_cache hits);
- ASSAY_TEST_FAIL_RANK=r, ASSAY_TEST_FAIL_AT=method, ASSAY_TEST_FAIL_MODE=exit|hang|raise:
  rank r dies (os._exit), hangs, or raises when `method` is first called.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from assay.runner import distributed
from assay.runner.models import register_model
from assay.runner.models.caching import request_key
from tests.engine.fake_lm import AssayFakeLM

MODEL_NAME = "assay-test"


@register_model(MODEL_NAME)
class DistributedTestLM(AssayFakeLM):
    def __init__(self, **_: object) -> None:
        pass

    def _before(self, method: str) -> None:
        rank = distributed.rank_and_world()[0]
        if os.environ.get("ASSAY_TEST_FAIL_RANK") != str(rank):
            return
        if os.environ.get("ASSAY_TEST_FAIL_AT", "generate_until") != method:
            return
        mode = os.environ.get("ASSAY_TEST_FAIL_MODE", "exit")
        print(f"test LM: rank {rank} injects '{mode}' at {method}", file=sys.stderr, flush=True)
        if mode == "exit":
            os._exit(17)
        if mode == "hang":
            time.sleep(3600)
        raise RuntimeError(f"injected failure in {method}")

    def _log(self, method: str, requests: list) -> None:
        prefix = os.environ.get("ASSAY_TEST_CALL_LOG")
        if prefix:
            rank = distributed.rank_and_world()[0]
            with open(f"{prefix}.rank{rank}", "a", encoding="utf-8") as handle:
                handle.writelines(request_key(method, tuple(r.args)) + "\n" for r in requests)

    def loglikelihood(self, requests, *, disable_tqdm=False):
        self._before("loglikelihood")
        out = super().loglikelihood(requests, disable_tqdm=disable_tqdm)
        self._log("loglikelihood", requests)
        return out

    def loglikelihood_rolling(self, requests, *, disable_tqdm=False):
        self._before("loglikelihood_rolling")
        out = super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm)
        self._log("loglikelihood_rolling", requests)
        return out

    def generate_until(self, requests, *, disable_tqdm=False):
        self._before("generate_until")
        out = super().generate_until(requests, disable_tqdm=disable_tqdm)
        self._log("generate_until", requests)
        return out


def main(argv: list[str]) -> int:
    if argv and argv[0] == "runner":
        from assay.runner.job import main as runner_main

        return runner_main(argv[1:])
    from assay.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
