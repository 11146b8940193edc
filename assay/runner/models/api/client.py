"""A bounded pool of concurrent JSON POSTs to one endpoint, with retries and timeouts.

The API backends send one request per batch of prompts; this module only moves JSON.
At most `num_concurrent` requests are in flight (one worker thread each: the work is
waiting on the server, so threads suffice and no event loop is needed). A request is
retried on 429, 5xx, timeouts and connection errors with exponential backoff (lm-eval's
tenacity settings: 0.5 * 2^n seconds, clamped to 1..10, `max_retries` attempts in all);
other 4xx answers are final. Errors are one sentence naming the URL, never the API key,
and quote at most `echoed_text.BODY_CHARS` of what the server said, on one line.

The API key goes to the endpoint's origin only: a redirect within it is followed (a 307 or
308 keeps the POST and its body), a redirect to another scheme, host or port fails the run
(urllib would send the `Authorization` header along).
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from assay import echoed_text, endpoint_urls
from assay.errors import DataError, UserError

_RETRY_STATUS = frozenset({408, 409, 425, 429})


class EndpointError(DataError):
    """The endpoint could not be reached or kept failing: exit 3 (model/data), as the runner's."""

    exit_code = 3


class _Retryable(Exception):
    pass


def backoff_seconds(attempt: int) -> float:
    """tenacity's wait_exponential(multiplier=0.5, min=1, max=10) before retry `attempt` (1-based)."""
    return float(min(10.0, max(1.0, 0.5 * 2**attempt)))


def api_key_source() -> str:
    """Where the key came from, for messages: the Secret the operator names, else the variable."""
    secret = os.environ.get("ASSAY_API_KEY_SECRET")
    return f"the Secret {secret!r}" if secret else "the OPENAI_API_KEY environment variable"


class APIClient:
    """POSTs JSON payloads to `url`; `post_all` keeps order and bounds concurrency."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str,
        num_concurrent: int = 1,
        max_retries: int = 3,
        timeout: float = 300,
        verify_certificate: bool = True,
        ca_cert_path: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if num_concurrent < 1 or max_retries < 1:
            raise UserError(
                f"model_args num_concurrent ({num_concurrent}) and max_retries ({max_retries}) must be at least 1."
            )
        self.url = url
        self._headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"}
        self.num_concurrent = num_concurrent
        self.max_retries = max_retries
        self.timeout = timeout
        self._sleep = sleep
        context = _ssl_context(verify_certificate, ca_cert_path) if url.startswith("https") else None
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), _SameOriginRedirects(url)
        )
        self.requests_sent = 0
        self.payloads_retried = 0
        """Payloads that needed more than one attempt (the run's sentinels read it)."""
        self.payloads_posted = 0
        self._lock = threading.Lock()

    def post(self, payload: Mapping[str, Any]) -> Any:
        """One payload, retried as the module says; the decoded JSON answer."""
        last = ""
        with self._lock:
            self.payloads_posted += 1
        for attempt in range(1, self.max_retries + 1):
            if attempt == 2:
                with self._lock:
                    self.payloads_retried += 1
            try:
                return self._post_once(payload)
            except _Retryable as err:
                last = str(err)
                if attempt < self.max_retries:
                    self._sleep(backoff_seconds(attempt))
        raise EndpointError(
            f"The model endpoint {self.url} did not answer after {self.max_retries} attempt(s); last error: {last}."
            " Check base_url and that the server is up."
        )

    def post_all(
        self, payloads: Sequence[Mapping[str, Any]], on_done: Callable[[int], None] | None = None
    ) -> list[Any]:
        """Every payload, at most `num_concurrent` at a time; answers in payload order.

        `on_done(i)` runs as payload i is answered (progress bars), from the caller's thread.
        """
        if self.num_concurrent == 1 or len(payloads) <= 1:
            answers = []
            for i, payload in enumerate(payloads):
                answers.append(self.post(payload))
                if on_done is not None:
                    on_done(i)
            return answers
        results: list[Any] = [None] * len(payloads)
        with ThreadPoolExecutor(max_workers=self.num_concurrent, thread_name_prefix="assay-api") as pool:
            futures = {pool.submit(self.post, payload): i for i, payload in enumerate(payloads)}
            try:
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    if on_done is not None:
                        on_done(futures[future])
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        return results

    def _post_once(self, payload: Mapping[str, Any]) -> Any:
        body = json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(self.url, data=body, headers=self._headers, method="POST")
        with self._lock:
            self.requests_sent += 1
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            detail = _server_detail(err)
            if err.code in (401, 403):
                raise UserError(
                    f"The model endpoint {self.url} refused the API key (HTTP {err.code}); check {api_key_source()}."
                ) from None
            if err.code in _RETRY_STATUS or err.code >= 500:
                raise _Retryable(f"HTTP {err.code} {detail}".strip()) from None
            raise UserError(f"The model endpoint {self.url} rejected a request (HTTP {err.code}): {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise _Retryable(f"{type(reason).__name__}: {echoed_text.bounded(str(reason))}") from None
        except json.JSONDecodeError as err:
            raise _Retryable(f"the answer is not JSON ({err.msg})") from None


def _server_detail(err: urllib.error.HTTPError) -> str:
    try:
        text = err.read(64 * 1024).decode("utf-8", "replace")
    except OSError:
        return ""
    return echoed_text.bounded(text)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects within the endpoint's origin only: the API key must not reach another server."""

    def __init__(self, url: str) -> None:
        self.url = url

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if endpoint_urls.origin(newurl) != endpoint_urls.origin(self.url):
            fp.close()
            raise UserError(
                f"The model endpoint {self.url} redirected to another server, {endpoint_urls.show_origin(newurl)} "
                f"(not {endpoint_urls.show_origin(self.url)}), which would get the API key: set base_url to the "
                "server's own URL if it is the one you mean."
            )
        if code in (307, 308):
            # urllib refuses to repeat a POST; a 307/308 (a route that moved, a trailing slash) asks for exactly that.
            return urllib.request.Request(
                newurl,
                data=req.data,
                headers=dict(req.headers),
                method=req.get_method(),
                origin_req_host=req.origin_req_host,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _ssl_context(verify: bool, ca_cert_path: str | None) -> ssl.SSLContext:
    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_cert_path and not os.path.isfile(ca_cert_path):
        raise UserError(f"model_args ca_cert_path {ca_cert_path!r} is not a file; give the CA bundle's path.")
    return ssl.create_default_context(cafile=ca_cert_path)
