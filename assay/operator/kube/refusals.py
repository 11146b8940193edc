"""Which errors of the API server to a create are the object's fault: a reason to show, not to retry.

An object the API server refuses for what it is (a pod label key that is no label key, a
toleration it cannot read, an admission policy that forbids it, an object over etcd's size
limit) is refused again however often it is sent. Retried, it kept the Evaluation Pending
for ever, its status saying "Job ... created". A final refusal fails the Evaluation with
the API server's words (`converge`); anything else is tried again.

Classified by the Status object's `reason`, which the API server sets on every error:

- Invalid (422: field validation; also a ValidatingAdmissionPolicy's denial unless the
  policy names another reason), BadRequest (400: a body it cannot decode),
  RequestEntityTooLarge (413: over the API server's 3 MiB body limit, or etcd's 1.5 MiB
  object limit since Kubernetes 1.11): final, the object's fault.
- Forbidden (403) is three things that look alike:
  - an admission webhook's or a ValidatingAdmissionPolicy's denial: final. The cluster's
    policy refuses this object; the admin changing the policy is a new decision, and the
    user re-runs (`evaluations.assay.dev/rerun`) or edits the spec.
  - a ResourceQuota (`exceeded quota: ...`, e.g. count/jobs.batch): not final. Finished
    Jobs get deleted and the quota frees up; Kubernetes' own Job controller retries pods
    refused for quota (FailedCreate) the same way.
  - RBAC: the operator's own role lacks a permission (`cannot create resource`, or a Role
    granting what the operator does not hold): not final, and not the spec's fault; the
    admin fixes the chart and the run goes on.
  The Status carries nothing structured that tells them apart: the quota plugin's and the
  RBAC authorizer's fixed phrases do, so those two are recognised and anything else
  Forbidden is taken for admission.
- NamespaceTerminating (403) and AlreadyExists (409): `kube.create` reports nothing made,
  or made already; neither reaches here.
- anything else (401, 404, 409 Conflict, 429, 5xx, no answer): not final, tried again.
"""

from __future__ import annotations

import json
import re
from typing import Any

from assay import echoed_text

FINAL_REASONS = frozenset({"Invalid", "BadRequest", "RequestEntityTooLarge"})
FINAL_CODES = frozenset({400, 413, 422})
"""The same, for an answer whose body is no Status (a proxy's, say)."""
MESSAGE_CHARS = 800
"""How much of the API server's message a status or an Event quotes."""
_QUOTA = re.compile(r"\bexceeded quota\b")
_RBAC = re.compile(r'\bcannot \w+ resource "|\bis attempting to grant RBAC permissions not currently held\b')


def _status(body: str) -> dict[str, Any]:
    """The Status object of an error body; {} when the body is not one."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) and answer.get("kind") == "Status" else {}


def status_of(body: str) -> tuple[str, str]:
    """(reason, message) of a Status body; ("", "") when the body is not one."""
    answer = _status(body)
    return str(answer.get("reason") or ""), str(answer.get("message") or "")


def namespace_terminating(code: int, body: str) -> bool:
    """A create refused because its namespace is being deleted: the Status's cause says so."""
    causes = (_status(body).get("details") or {}).get("causes") or ()
    return code == 403 and any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def final(code: int, body: str) -> str | None:
    """The API server's message, on one bounded line, when its refusal of an object is final; else None."""
    reason, message = status_of(body)
    said = echoed_text.bounded(message or body or f"HTTP {code}", MESSAGE_CHARS)
    if reason in FINAL_REASONS or (not reason and code in FINAL_CODES):
        return said
    if reason == "Forbidden" or (not reason and code == 403):
        return None if _QUOTA.search(message) or _RBAC.search(message) else said
    return None


def transient_note(code: int, body: str) -> str:
    """What a refusal that is not final said (a quota, RBAC, an outage), on one bounded line."""
    _, message = status_of(body)
    return echoed_text.bounded(message or f"HTTP {code}", MESSAGE_CHARS)
