"""An Evaluation whose free-form fields nest thousands of levels deep is decoded like any other, on
the threads kopf decodes and decides on: one tenant's deep spec must not stop the operator's
watch of every namespace's Evaluations."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def test_the_operator_decodes_and_hashes_an_evaluation_nested_10000_levels_on_every_thread() -> None:
    # A fresh interpreter: the recursion limit is process-wide, and the default must be seen failing.
    program = textwrap.dedent(
        """
        import asyncio, json, threading
        from assay.operator import main
        from assay.operator.build import builders
        from assay.spec import parse_spec
        deep = '{"model": "dummy", "tasks": ["arc_easy"], "metadata": {"x": ' + "[" * 10000 + "]" * 10000 + "}}"
        try:
            json.loads(deep)
            print("default: decoded")
        except RecursionError:
            print("default: RecursionError")
        main.allow_deep_json()
        said = []
        async def on_the_loop():
            said.append(len(json.dumps(json.loads(deep))))
        asyncio.run(on_the_loop())
        def in_a_handler_thread():
            spec = parse_spec(json.loads(deep))
            said.append(len(builders.spec_hash(spec)))
        thread = threading.Thread(target=in_a_handler_thread)
        thread.start()
        thread.join()
        print(said)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "default: RecursionError"  # what kopf's watch met before
    encoded, hashed = json.loads(lines[1])
    assert encoded > 20_000 and hashed == 16  # the whole spec back again, and its run's hash
