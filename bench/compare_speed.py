"""How long `assay compare` takes on two runs of MMLU's size (57 tasks, 14,022 documents, acc
and acc_norm), as a user runs it: a fresh process, best and median of --repeats. Prints, never
fails on speed.

    python bench/compare_speed.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compare.crafted import write_mmlu_like_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = write_mmlu_like_run(Path(tmp) / "a", 0)
        candidate = write_mmlu_like_run(Path(tmp) / "b", 1)
        command = [sys.executable, "-m", "assay", "compare", str(baseline), str(candidate), "--format", "json"]
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=False)
            seconds.append(time.perf_counter() - start)
    print(
        f"assay compare, MMLU-sized runs: best {min(seconds):.2f} s, median {statistics.median(seconds):.2f} s of {args.repeats}"
    )


if __name__ == "__main__":
    main()
