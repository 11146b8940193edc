"""The API key goes to the endpoint's origin only, and what a server says is quoted bounded.

Two real HTTP servers on 127.0.0.1, on two ports: two origins, as two hosts would be. The
first redirects; the second records every header it gets.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from assay.errors import UserError
from assay.runner.models.api.args import APIArgs
from assay.runner.models.api.client import APIClient

KEY = "sk-" + "7fQ" * 10
Route = Callable[[str, bytes], tuple[int, dict[str, str], bytes]]
"""(method, body) → (status, headers, body) for one path."""


class _Server:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, headers, data = outer.routes[self.path](self.command, body)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(data)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _handle

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    pair = (_Server(), _Server())
    yield pair
    for server in pair:
        server.close()


def _redirect(to: str, code: int = 302) -> Route:
    return lambda method, body: (code, {"Location": to}, b"")


def _completion(method: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    answer = {"choices": [{"text": "ok", "method": method, "echo": body.decode()}]}
    return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_refused_and_the_key_never_leaves(
    servers: tuple[_Server, _Server], code: int
) -> None:
    endpoint, other = servers
    other.routes["/v1/completions"] = _completion
    endpoint.routes["/v1/completions"] = _redirect(f"{other.base}/v1/completions", code)
    client = APIClient(f"{endpoint.base}/v1/completions", api_key=KEY)
    with pytest.raises(UserError) as refused:
        client.post({"prompt": "hi"})
    assert str(refused.value) == (
        f"The model endpoint {endpoint.base}/v1/completions redirected to another server, {other.base} (not "
        f"{endpoint.base}), which would get the API key: set base_url to the server's own URL if it is the one you mean."
    )
    assert other.seen == []  # not a request, so not a header
    assert endpoint.seen[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert len(endpoint.seen) == 1  # refused, not retried


def test_another_scheme_counts_as_another_origin(servers: tuple[_Server, _Server]) -> None:
    endpoint, _ = servers
    endpoint.routes["/v1/completions"] = _redirect(endpoint.base.replace("http://", "https://") + "/v1/completions")
    with pytest.raises(UserError, match=r"redirected to another server, https://127\.0\.0\.1:\d+ \(not http://"):
        APIClient(f"{endpoint.base}/v1/completions", api_key=KEY).post({"prompt": "hi"})


@pytest.mark.parametrize("code", [307, 308])
def test_a_same_origin_307_or_308_is_followed_with_the_post_and_its_body(
    servers: tuple[_Server, _Server], code: int
) -> None:
    endpoint, _ = servers
    endpoint.routes["/v1/completions"] = _redirect(
        "/v1/completions/", code
    )  # a relative Location, as a slash fix sends
    endpoint.routes["/v1/completions/"] = _completion
    answer = APIClient(f"{endpoint.base}/v1/completions", api_key=KEY).post({"prompt": "hi"})
    assert answer["choices"][0]["method"] == "POST" and json.loads(answer["choices"][0]["echo"]) == {"prompt": "hi"}
    followed = endpoint.seen[1]
    assert followed["path"] == "/v1/completions/" and followed["headers"]["Authorization"] == f"Bearer {KEY}"


def test_a_same_origin_302_is_followed_as_urllib_does(servers: tuple[_Server, _Server]) -> None:
    endpoint, _ = servers
    endpoint.routes["/old"] = _redirect(f"{endpoint.base}/new")
    endpoint.routes["/new"] = _completion
    answer = APIClient(f"{endpoint.base}/old", api_key=KEY).post({"prompt": "hi"})
    # 302 after a POST becomes a GET, as in browsers, requests and lm-eval's clients.
    assert answer["choices"][0]["method"] == "GET" and [s["path"] for s in endpoint.seen] == ["/old", "/new"]


def test_an_error_body_is_quoted_on_one_line_bounded(servers: tuple[_Server, _Server]) -> None:
    endpoint, _ = servers
    noisy = "\x1b[31mbad\x1b[0m request\nforged: line\u202e" + "x" * 5000
    endpoint.routes["/v1/completions"] = lambda method, body: (400, {}, noisy.encode())
    with pytest.raises(UserError) as refused:
        APIClient(f"{endpoint.base}/v1/completions", api_key=KEY).post({"prompt": "hi"})
    message = str(refused.value)
    quoted = message.split("(HTTP 400): ", 1)[1]
    assert quoted.startswith("[31mbad[0m request forged: line" + "x")
    assert len(quoted) == 300 and quoted.endswith("...")
    assert not any(c in message for c in "\x1b\n\u202e")


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pw@vllm.example/v1/completions",
        "http://token@127.0.0.1:8000/v1",
        "http://127.0.0.1:8000@evil.example/v1",
    ],
)
def test_a_base_url_with_userinfo_is_refused_without_repeating_it(url: str) -> None:
    with pytest.raises(UserError) as refused:
        APIArgs.from_model_args("local-completions", {"base_url": url, "tokenizer_backend": "none"})
    message = str(refused.value)
    assert "has a user name or password in it" in message and "OPENAI_API_KEY" in message
    assert "pw" not in message and "token@" not in message and "8000@" not in message


def test_assay_run_refuses_a_base_url_with_a_password_in_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    from assay import cli

    args = "base_url=https://user:s3cret@vllm.example/v1/completions,tokenizer_backend=none"
    code = cli.main(
        ["run", "--model", "local-completions", "--model_args", args, "--tasks", "arc_easy", "--limit", "1"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "s3cret" not in err and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert line.endswith(
        "has a user name or password in it: remove them, and give the API key in the "
        "OPENAI_API_KEY environment variable."
    )
