"""Work on a tenant's text in a child process with CPU, memory and wall-time limits.

The operator decides every namespace's Evaluations in one process, so a parse that crashes
it (libyaml's C composer overflows the C stack on deep nesting: SIGSEGV), eats its memory
or holds a handler thread for minutes stops every tenant's runs. The task loader bounds
what it knows of (`bounded_yaml`: depth, aliases, size); this module bounds what nobody
has found yet: the tenant's task YAMLs are parsed first in a fresh child process, and a
child that crashes, runs out of memory or time is a refusal of that Evaluation, once. The
handler thread waits at most `Limits.wall_seconds`; other Evaluations are decided on the
other threads meanwhile.

A fresh `python -c` rather than a fork: the operator has threads (kopf's loop, the handler
pool), and forking a threaded process may copy a lock another thread held. The child is
given the parent's `sys.path`, so it runs the same code. Only Evaluations with
spec.taskSources pay for it: about 0.1 s of CPU (the interpreter and yaml), once per decision.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from assay.errors import UserError

JSON = Any

MEMORY_EXIT = 3
"""The child's exit status when an allocation failed under its memory limit."""
_BOOTSTRAP = (
    "import json, sys; request = json.loads(sys.stdin.buffer.read()); sys.path[:] = request['path']; "
    "from assay.operator.admission import bounded_parse; bounded_parse.child(request)"
)


@dataclasses.dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 5
    memory_bytes: int = 256 * 1024 * 1024
    """Address space (RLIMIT_AS): a 1 MiB task file of 180,000 values parses within 128 MiB. Well
    under the operator container's own memory limit (the chart's 1 GiB), so that the child runs
    out of memory first, not the operator."""
    wall_seconds: float = 10.0
    """How long the parent waits, starting included (a loaded node starts Python slowly)."""


LIMITS = Limits()


class ChildFailed(Exception):
    """The child did not answer: it crashed, ran past a limit, or raised something that is no UserError."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        """What happened, as a sentence's end: "crashed (signal SIGSEGV)", "ran past its 10 s", ..."""


def run(target: str, args: Sequence[JSON], *, limits: Limits = LIMITS) -> JSON:
    """`module:function` called with `args` in a child process within `limits`: what it returns (JSON).

    A UserError it raises is raised here with its sentence; anything else that keeps it from
    answering is ChildFailed."""
    request = {
        "path": [p for p in sys.path if p],
        "target": target,
        "args": list(args),
        "limits": dataclasses.asdict(limits),
    }
    process = subprocess.Popen(
        [sys.executable, "-E", "-s", "-c", _BOOTSTRAP],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"LC_ALL": "C.UTF-8"},
        start_new_session=True,  # no terminal signal of the operator's reaches it, and none of its reaches us
    )
    try:
        out, _ = process.communicate(json.dumps(request).encode(), timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise ChildFailed(f"ran past its {limits.wall_seconds:g} s") from None
    return _answer(process.returncode, out, limits)


def _answer(returncode: int, out: bytes, limits: Limits) -> JSON:
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        raise ChildFailed(f"ran past its {limits.cpu_seconds} s of CPU")
    if returncode == MEMORY_EXIT:
        raise ChildFailed(f"ran past its {limits.memory_bytes // (1024 * 1024)} MiB of memory")
    if returncode < 0:
        raise ChildFailed(f"crashed (signal {signal.Signals(-returncode).name})")
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if returncode != 0 or not isinstance(answer, dict):
        raise ChildFailed(f"crashed (exit status {returncode})")
    if "refused" in answer:
        raise UserError(str(answer["refused"]))
    if "error" in answer:
        raise ChildFailed(f"failed ({answer['error']})")
    return answer.get("result")


def child(request: dict[str, Any]) -> None:
    """The child's side: limit itself, call the target, write its answer as JSON on stdout."""
    import resource

    limits = Limits(**request["limits"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    try:  # should the container run short of memory anyway, its OOM killer takes the child first
        with open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write("1000")
    except OSError:
        pass
    module_name, _, function_name = str(request["target"]).partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        answer: dict[str, Any] = {"result": function(*request["args"])}
    except MemoryError:
        os._exit(MEMORY_EXIT)
    except UserError as error:
        answer = {"refused": str(error)}
    except Exception as error:
        answer = {"error": type(error).__name__}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
