"""The `assay` command line run against the e2e cluster, as a user on a laptop runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def assay_cli(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)  # the kubeconfig, as on a laptop, even when the suite runs in a pod
    return subprocess.run(
        [sys.executable, "-m", "assay", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
