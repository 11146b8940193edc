"""/metrics' certificate: a mounted kubernetes.io/tls Secret, or a self-signed one made at start.

The series name every namespace's Evaluations, models and scores, and a scraper sends its
bearer token with each request, so /metrics is HTTPS unless the admin opts out. With no
certificate given, the operator makes a self-signed one when it starts, as controller-runtime's
metrics server does without a certificate directory (kubebuilder's scaffold then scrapes it
with insecureSkipVerify): the traffic is encrypted, the token never crosses the wire in clear,
and a scraper that must also know the server gives a certificate from a Secret and its CA.

Python's `ssl` serves a certificate but cannot create one, and the operator's dependencies
carry no library that can (`cryptography` is not among them), so the certificate is made by
the `openssl` command, which the images' Debian base has (its ca-certificates depends on it).
A fresh key pair at every start, in a private temporary directory, never written elsewhere.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from assay.errors import UserError

logger = logging.getLogger(__name__)

CERT_RECHECK_SECONDS = 60.0
"""How often the certificate files are looked at for a renewal."""
SELF_SIGNED_DAYS = 365
"""Validity of a certificate made at start (controller-runtime's self-signed ones last a year too);
a new one is made at each start."""
OPENSSL_TIMEOUT = 60.0
"""Seconds `openssl` may take to make the key and certificate (an EC key: milliseconds)."""


class TlsFiles:
    """`tls.crt` and `tls.key` of a directory (a mounted kubernetes.io/tls Secret) as a server context."""

    def __init__(self, directory: str | Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.cert, self.key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        if not (self.cert.is_file() and self.key.is_file()):
            raise UserError(
                f"--metrics-cert-dir {directory} has no tls.crt and tls.key: mount a kubernetes.io/tls "
                "Secret there (the chart's metrics.tls.secretName), or leave the option out for a "
                "self-signed certificate."
            )
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._clock = clock
        self._loaded = self._stamp()
        self.context.load_cert_chain(self.cert, self.key)
        self._checked = clock()
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, int]:
        return os.stat(self.cert).st_mtime_ns, os.stat(self.key).st_mtime_ns

    def refresh(self) -> None:
        """Load the files again if they changed (a renewed Secret); at most every CERT_RECHECK_SECONDS."""
        with self._lock:
            if self._clock() - self._checked < CERT_RECHECK_SECONDS:
                return
            self._checked = self._clock()
            try:
                stamp = self._stamp()
                if stamp != self._loaded:
                    self.context.load_cert_chain(self.cert, self.key)
                    self._loaded = stamp
                    logger.info("Loaded the renewed /metrics certificate %s.", self.cert)
            except (OSError, ssl.SSLError) as error:  # half-written during a renewal: the old one serves on
                logger.warning("Could not load the renewed /metrics certificate %s: %s", self.cert, error)


def host_names() -> list[str]:
    """The names a certificate made here is for: the pod's host name (its name in a cluster) and localhost."""
    names = [socket.gethostname(), "localhost"]
    return list(dict.fromkeys(n for n in names if n))


def self_signed(directory: str | Path | None = None, *, names: Sequence[str] | None = None) -> TlsFiles:
    """A new EC P-256 key and a self-signed certificate for `names` (and 127.0.0.1, ::1) in `directory`
    (default: a new private temporary directory), loaded as TlsFiles. Raises UserError when they
    cannot be made, naming the ways to serve /metrics without one."""
    folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="assay-metrics-tls-"))
    names = list(names) if names is not None else host_names()
    alt_names = ",".join([*(f"DNS:{n}" for n in names), "IP:127.0.0.1", "IP:::1"])
    command = [
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "tls.key",
        "-out",
        "tls.crt",
        "-days",
        str(SELF_SIGNED_DAYS),
        "-subj",
        f"/CN={names[0] if names else 'assay-operator'}",
        "-addext",
        f"subjectAltName={alt_names}",
    ]
    how_else = (
        "give a certificate (the chart's metrics.tls.secretName, --metrics-cert-dir), or serve plain "
        "HTTP (metrics.tls.enabled: false, --no-metrics-https)"
    )
    old_umask = os.umask(0o077)  # the key is the operator's alone
    try:
        made = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=OPENSSL_TIMEOUT)
    except FileNotFoundError:
        raise UserError(
            f"/metrics is served over HTTPS and no certificate was given, and the openssl command that "
            f"makes a self-signed one is not installed: install it, or {how_else}."
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(
            f"openssl did not make /metrics' certificate within {OPENSSL_TIMEOUT:g} s: {how_else}."
        ) from None
    finally:
        os.umask(old_umask)
    if made.returncode != 0:
        last = (made.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"openssl could not make /metrics' self-signed certificate ({last}): {how_else}.")
    logger.info("Serving /metrics over HTTPS with a self-signed certificate made at start (for %s).", ", ".join(names))
    return TlsFiles(folder)
