"""kopf as the operator runs it: no diff base kept, the watches' timeouts, the handlers' thread
pool (set once by the startup handler, `handlers.configure`, before the first watch), and its
login on the operator's own credentials (`handlers.login`).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import kopf

from assay.kube import credentials

WATCH_SERVER_TIMEOUT = 300
"""Seconds the API server keeps one watch open; kopf reconnects after it."""
HANDLER_WORKERS = 32
"""Threads deciding runs (kopf's pool). kopf's default, min(32, cpus + 4), is 6 on a 2-core
node: a burst of Evaluations then queues behind API round trips, not behind CPU."""


class NoDiffBase(kopf.DiffBaseStorage):
    """No essence kept or compared: with no create/update handler, nothing reads kopf's diffs.

    kopf builds each watch event's essence (a deep copy of the whole body) whatever handlers
    there are; for the operator's Jobs, pods and Evaluations under a burst that was a sixth of
    its CPU (py-spy, 300 Evaluations)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def tune(settings: kopf.OperatorSettings) -> None:
    """kopf's settings for this operator, set at startup before any watch begins."""
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT + 30
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = HANDLER_WORKERS
    # Namespaces are given explicitly (or all); no need to watch Namespaces or CRDs.
    settings.scanning.disabled = True


def connection_info(given: credentials.Credentials) -> kopf.ConnectionInfo:
    """kopf's login from the credentials the operator's own requests use (`assay.kube.credentials`):
    its watches are the same user, read the same way (a service account's token as it is on disk
    now, a kubeconfig's exec plugin, client certificate or token), without the kubernetes package
    kopf's own logins would read them with. kopf logs in again when an answer is 401 (a token
    rotated or expired), which reads them again. kopf has no tls-server-name: the server's own
    name is checked."""
    scheme, _, token = (given.authorization() or "").partition(" ")
    username = password = None
    if scheme == "Basic":
        username, _, password = base64.b64decode(token).decode().partition(":")
        scheme = token = ""
    cert, key = given.client_cert or (None, None)
    return kopf.ConnectionInfo(
        server=given.server,
        ca_path=given.ca_file,
        ca_data=given.ca_data if not given.ca_file else None,  # kopf takes one of the two
        insecure=given.insecure or None,
        scheme=scheme or None,
        token=token or None,
        username=username,
        password=password,
        certificate_data=cert,
        private_key_data=key,
        proxy_url=given.proxy,
        default_namespace=given.namespace,
    )
