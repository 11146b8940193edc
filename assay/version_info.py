"""What `assay --version` prints: the package version and, run from a checkout, its commit.

Two checkouts of 0.1.0 can score differently, so the commit is the version that matters to
someone reporting a number or a bug; a wheel's install has no git history and says the version
alone. The commit is the checkout's (where this package is imported from), not the current
folder's.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import assay
from assay.extras import checkout


def version_line() -> str:
    """'assay 0.1.0 (commit 63da1e1c2f3a, /path/to/checkout)', with ', uncommitted changes' when
    tracked files differ from that commit; 'assay 0.1.0' outside a checkout."""
    root = checkout()
    commit = _git(root, "rev-parse", "--short=12", "HEAD") if root is not None else None
    if root is None or not commit:
        return f"assay {assay.__version__}"
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return f"assay {assay.__version__} (commit {commit}{', uncommitted changes' if dirty else ''}, {root})"


def _git(root: Path, *args: str) -> str | None:
    """git's output in `root`, or None where git is missing or `root` is no repository (a source tarball)."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


class VersionAction(argparse.Action):
    """`--version`: the version line, found only when asked (git is a subprocess)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_line())
        parser.exit()
