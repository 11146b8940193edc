"""The images' lock files (deploy/images/*.lock.txt) read as name → (pinned version, hashes)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


IMAGES = REPO / "deploy" / "images"


HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def lock(name: str) -> dict[str, tuple[str, int]]:
    """A lock file as normalized name → (pinned version, number of sha256 hashes)."""
    text = re.sub(r"\\\n", " ", (IMAGES / name).read_text())
    pins: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement = Requirement(line.split(" --hash", 1)[0])
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1 and specifiers[0].operator == "==", f"{name}: {line[:80]} is not pinned with =="
        pins[canonicalize_name(requirement.name)] = (specifiers[0].version, len(HASH.findall(line)))
    return pins
