"""What a finished run left behind: its scores in status, its files on the output volume.

No Succeeded without scores. The runner writes the scores to `status.results` before it
writes any file, and only while `status.jobName` names its Job (a JSON patch that tests
it first); a new run clears the previous run's results. So a Complete Job whose
Evaluation has no `status.results` is a run whose last status write was refused or lost:
the operator calls it Failed with reason ResultsNotRecorded, as it does a Job the runner
failed with `RESULTS_NOT_RECORDED_EXIT_CODE` for the same cause, and says where the
results files are, if anywhere (an emptyDir output died with the pod).

Once the scores are in, the runner reports its files in `status.outputFiles`; the
operator shows that as the condition OutputWritten: True (reason OutputWritten, the
message names the file) or False (reason OutputNotWritten, the error in one sentence)
when the output volume was full or read-only. That is a warning: the scores are in
status and the run succeeded. OutputWritten is absent until the runner reports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from assay import echoed_text
from assay.operator.build import containers
from assay.spec import RESULTS_NOT_RECORDED_EXIT_CODE

RESULTS_NOT_RECORDED = "ResultsNotRecorded"
"""Reason: the run finished but its scores never reached status.results."""
OUTPUT_WRITTEN, OUTPUT_NOT_WRITTEN = "OutputWritten", "OutputNotWritten"
"""The condition, and its reasons, on whether the runner wrote its results files."""
MESSAGE_CHARS = 1024


def results_recorded(status: Mapping[str, Any] | None) -> bool:
    """Whether the current run's scores are in status (see the module's note)."""
    return (status or {}).get("results") is not None


def failed_unrecorded(failure_message: str | None) -> bool:
    """Whether a FailJob rule matched the runner's exit for lost scores, from the Job controller's
    message ("Container runner for pod ns/p failed with exit code 74 matching FailJob rule at index 3")."""
    found = re.search(r"exit code (\d+)", failure_message or "")
    return found is not None and int(found.group(1)) == RESULTS_NOT_RECORDED_EXIT_CODE


def files_location(spec: Mapping[str, Any] | None, status: Mapping[str, Any]) -> str:
    """Where a run's results files are, as the end of a sentence: a PVC and folder, or nowhere."""
    pvc = ((spec or {}).get("output") or {}).get("pvc")
    if not pvc:
        return "nowhere: the output was the pod's emptyDir"
    folder = str(status.get("outputDir") or "").removeprefix(containers.OUTPUT_MOUNT).strip("/")
    return f"on PVC {pvc} in {folder or 'its root'}, if the runner could write them (its log says)"


def output_written(status: Mapping[str, Any]) -> dict[str, tuple[bool, str, str]]:
    """The OutputWritten condition's (status, reason, message), once the runner reported its files."""
    files = status.get("outputFiles")
    if not isinstance(files, Mapping) or "written" not in files:
        return {}
    written = bool(files["written"])
    # Written by the runner's image: one line, bounded.
    message = echoed_text.bounded(str(files.get("message") or ""), MESSAGE_CHARS)
    default = "The results files were written." if written else "The results files were not written."
    return {OUTPUT_WRITTEN: (written, OUTPUT_WRITTEN if written else OUTPUT_NOT_WRITTEN, message or default)}
