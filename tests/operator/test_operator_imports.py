"""The operator's image has no ML stack: importing the operator must not pull one in.

import-linter checks the static graph (pyproject.toml); this checks what an import does
at run time, in a fresh interpreter, for every operator module and the shared spec.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_importing_the_operator_loads_no_ml_stack_and_no_engine() -> None:
    script = textwrap.dedent("""
        import importlib, pkgutil, sys
        import assay.operator
        names = ["assay.spec", "assay.cli", "assay.runner.api"]
        names += [m.name for m in pkgutil.walk_packages(assay.operator.__path__, "assay.operator.")]
        for name in names:
            importlib.import_module(name)
        heavy = ("torch", "transformers", "datasets", "accelerate")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
        engine = sorted(m for m in sys.modules if m.startswith("assay.runner.") and m != "assay.runner.api")
        print(len(names))
        assert not loaded and not engine, (loaded, engine)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 40  # every module, those in the role folders too
