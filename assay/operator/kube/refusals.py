"""Which errors of the API server to a create are the object's fault: a reason to show, not to retry.

An object the API server refuses for what it is (a pod label key that is no label key, a
toleration it cannot read, an admission policy that forbids it, an object over etcd's size
limit) is refused again however often it is sent. Retried, it kept the Evaluation Pending
for ever, its status saying "Job ... created". A final refusal fails the Evaluation with
the API server's words (`converge`); anything else is tried again.

Classified by the Status object's `reason` (`api_errors`), which the API server sets on every error:

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

import re

from assay import echoed_text
from assay.kube import api_errors

FINAL_REASONS = frozenset({api_errors.INVALID, api_errors.BAD_REQUEST, api_errors.TOO_LARGE})
"""For an answer that is no Status (a proxy's, say), the reason of its code (422, 400, 413): `api_errors`."""
MESSAGE_CHARS = 800
"""How much of the API server's message a status or an Event quotes."""
_QUOTA = re.compile(r"\bexceeded quota\b")
_RBAC = re.compile(r'\bcannot \w+ resource "|\bis attempting to grant RBAC permissions not currently held\b')


def namespace_terminating(error: api_errors.ApiError) -> bool:
    """A create refused because its namespace is being deleted: the Status's cause says so."""
    return error.code == 403 and error.has_cause(api_errors.NAMESPACE_TERMINATING)


def final(error: api_errors.ApiError) -> str | None:
    """The API server's message, on one bounded line, when its refusal of an object is final; else None."""
    said = echoed_text.bounded(error.message or error.body or f"HTTP {error.code}", MESSAGE_CHARS)
    if error.reason in FINAL_REASONS:
        return said
    if error.reason == api_errors.FORBIDDEN:
        return None if _QUOTA.search(error.message) or _RBAC.search(error.message) else said
    return None


def transient_note(error: api_errors.ApiError) -> str:
    """What a refusal that is not final said (a quota, RBAC, an outage), on one bounded line."""
    return echoed_text.bounded(error.message or f"HTTP {error.code}", MESSAGE_CHARS)
