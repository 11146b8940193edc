"""docs/quickstart.md's shell blocks, for the tests that run them as written.

Each block the tests use follows a `<!-- quickstart: NAME -->` comment (invisible when the
page is rendered, so a reader's copy-paste is unchanged): tests/project/test_readme.py runs the
offline `prepare` block and checks the names, tests/e2e/test_quickstart.py runs the cluster
blocks on the e2e node.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "docs" / "quickstart.md"
NAMESPACE = "assay-system"
"""The one namespace the quickstart puts everything in."""

_BLOCK = re.compile(r"<!-- quickstart: ([a-z0-9-]+) -->\n```bash\n(.*?)```", re.S)
_IMAGE = re.compile(r"ghcr\.io/assay-dev/assay-[a-z-]+:[0-9A-Za-z.+-]+")


def quickstart_blocks(path: Path = QUICKSTART) -> dict[str, str]:
    """Block name → its shell text, in the page's order."""
    blocks: dict[str, str] = {}
    for name, body in _BLOCK.findall(path.read_text()):
        assert name not in blocks, f"{path.name} names two blocks {name!r}"
        blocks[name] = body
    return blocks


def image_references(text: str) -> list[str]:
    """The ghcr.io/assay-dev image references a text names, tag included."""
    return _IMAGE.findall(text)


def localized(script: str, *, shared_data: Path | None = None) -> str:
    """A block made runnable from any folder: the repository's paths made absolute, the
    benchmark files where this machine keeps them (if a block names ../shared/data; the
    quickstart's own do not), `python` and `assay` this interpreter's."""
    script = re.sub(r"(?<![\w/.-])(examples|deploy)/", lambda m: f"{REPO}/{m.group(1)}/", script)
    if shared_data is not None:
        script = script.replace("../shared/data", str(shared_data))
    script = re.sub(r"^python ", f"{sys.executable} ", script, flags=re.M)
    return re.sub(r"^assay ", f"{sys.executable} -m assay ", script, flags=re.M)
