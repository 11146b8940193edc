"""Whether this machine can reach the Hugging Face hub: asked once, answered within seconds.

Without a network, huggingface_hub retries a file it has not cached five times, with
backoff (1 + 2 + 4 + 8 + 8 s), after a connection error and after a TLS error alike, and
`datasets` does much the same; where packets are dropped rather than refused, each try
first waits out HF_HUB_ETAG_TIMEOUT (10 s). A model or dataset missing from this machine
took half a minute or more to fail. `preflight` asks this module first, and only when the
run needs something from the hub: one HEAD request to the hub's URL through
huggingface_hub's own HTTP client (its proxies, certificates and HF_ENDPOINT), no retry,
`TIMEOUT_S` in all, name lookup included. Any HTTP answer counts as reachable: tokens
and missing repositories are still the loaders' to report.
"""

from __future__ import annotations

import functools
import threading

TIMEOUT_S = 2.0


def endpoint() -> str:
    """The hub's URL as huggingface_hub uses it (HF_ENDPOINT, else https://huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def unreachable(url: str | None = None, timeout: float = TIMEOUT_S) -> str | None:
    """None when the hub (`url`, else `endpoint()`) answers a HEAD request within `timeout` seconds,
    else why it did not. Asked once per URL: a run's model and datasets share the answer."""
    return _probe(url or endpoint(), timeout)


@functools.cache
def _probe(url: str, timeout: float) -> str | None:
    # In a thread, so that the bound holds for the name lookup too, which no HTTP client times out.
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            from huggingface_hub import get_session

            get_session().head(url, timeout=timeout)
            outcome.append(None)
        except Exception as error:
            outcome.append(f"{type(error).__name__}: {error}")

    worker = threading.Thread(target=attempt, name="assay-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout + 0.5)  # the client's own timeout fires first where it applies
    return outcome[0] if outcome else f"no answer within {timeout:g} s"
