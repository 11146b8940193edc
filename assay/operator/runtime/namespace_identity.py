"""The runners' identity of each namespace, made when a run first needs it and then known.

Every runner of a namespace runs as `assay-runner` (`build.runner_identity`): its
ServiceAccount, Role and RoleBinding are ensured (`owned.ensure`, as the operator's own
namespace objects) before the first Job of the namespace is created, then remembered, so
that a run costs no request for its identity: a burst of a thousand Evaluations in one
namespace costs three requests for it, not three thousand.

What is remembered is checked again after `RECHECK_SECONDS` (one JSON patch each, which
also brings back a Role made wider by hand), and at once after an operator restart. An
account deleted by hand is made again sooner: a Job whose pods cannot be created for want
of it (the Job controller's FailedCreate, which the operator reads for a run whose pods
are late) has its namespace's identity made again (`restore_if_missing`); the Job
controller retries creating the pods, so the run goes on.

A namespace's runs are decided on several threads at once: one lock per namespace makes
the first of them ensure the identity while the others wait for it, instead of every
decision of a burst sending the same three requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from assay.operator.build import runner_identity
from assay.operator.runtime import owned

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 600.0
"""How long an ensured identity is taken to hold before it is ensured again."""


class RunnerIdentities:
    """namespace → when its identity was last ensured."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, recheck: float = RECHECK_SECONDS) -> None:
        self._clock, self._recheck = clock, recheck
        self._pull_secrets: dict[str, tuple[str, ...]] = {}
        self._ensured: dict[str, float] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def ensure(self, namespace: str, *, pull_secrets: tuple[str, ...] | None = None) -> None:
        """Make the namespace's runner identity hold, unless it was made or checked lately; its
        account pulls with `pull_secrets` (None: those it was last made with).

        Raises owned.NotOwned when an object of its name is not the operator's (each decision
        in the namespace meets it again, until it is deleted or renamed), ApiError to try again."""
        if self._fresh(namespace):
            return
        with self._lock:
            lock = self._locks.setdefault(namespace, threading.Lock())
        with lock:
            if self._fresh(namespace):  # made by the decision this one waited for
                return
            known = namespace in self._ensured
            if pull_secrets is not None:
                self._pull_secrets[namespace] = pull_secrets
            secrets = self._pull_secrets.get(namespace, ())
            for manifest in runner_identity.manifests(namespace, pull_secrets=secrets):
                # Known before (a recheck): it likely exists, so a patch goes first.
                owned.ensure(manifest, uid=None, likely=known)
            with self._lock:
                self._ensured[namespace] = self._clock()

    def forget(self, namespace: str) -> None:
        """Ensure it again at the next run (it was found missing)."""
        with self._lock:
            self._ensured.pop(namespace, None)

    def _fresh(self, namespace: str) -> bool:
        with self._lock:
            made = self._ensured.get(namespace)
        return made is not None and self._clock() - made < self._recheck


identities = RunnerIdentities()
"""The operator's: one per process, shared by every decision."""

_MISSING = f'serviceaccount "{runner_identity.ACCOUNT}" not found'
"""How the API server refuses a pod of an account that does not exist (the Job controller's FailedCreate)."""


def restore_if_missing(namespace: str, problem: str) -> bool:
    """Make the namespace's identity again when `problem` (why a run's pods are late) is its
    missing account; True when that was the problem. A failure to is logged: the sweeps look again."""
    if _MISSING not in problem:
        return False
    identities.forget(namespace)
    try:
        identities.ensure(namespace)
    except Exception as error:
        logger.warning("Could not make the runner identity of namespace %s again: %s", namespace, error)
    return True
