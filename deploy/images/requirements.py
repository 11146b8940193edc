"""Print the requirements of Assay's core and the given extras, read from pyproject.toml.

lock.sh resolves these into the images' lock files (hashes pinned); the runner-vllm build,
which has no lock, installs them directly. Self-references such as `assay[hf,metrics]` are expanded.

    python requirements.py pyproject.toml operator        # core + the operator extra
"""

from __future__ import annotations

import re
import sys
import tomllib


def requirements(pyproject: dict, extras: list[str]) -> list[str]:
    project = pyproject["project"]
    name = project["name"]
    optional = project.get("optional-dependencies", {})
    out: list[str] = list(project.get("dependencies", []))
    seen: set[str] = set()
    pending = list(extras)
    while pending:
        extra = pending.pop(0)
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"pyproject.toml has no extra {extra!r}; it has {', '.join(sorted(optional))}.")
        seen.add(extra)
        for requirement in optional[extra]:
            self_ref = re.fullmatch(rf"{re.escape(name)}\[([^\]]+)\]", requirement.replace(" ", ""))
            if self_ref:
                pending += self_ref.group(1).split(",")
            else:
                out.append(requirement)
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    with open(sys.argv[1], "rb") as f:
        data = tomllib.load(f)
    print("\n".join(requirements(data, [e for arg in sys.argv[2:] for e in arg.split(",") if e])))
