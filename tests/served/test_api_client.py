"""The API backends' HTTP behaviour against real local HTTP servers (no vLLM needed).

Each test runs a stdlib ThreadingHTTPServer on loopback that answers like a misbehaving
or minimal OpenAI-compatible server: retries, the concurrency bound, unreachable
endpoints, refused keys, and servers that do not echo prompt logprobs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.errors import UserError
from assay.runner.models.api.client import APIClient, EndpointError, backoff_seconds
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest
from tests.served.vllm_server import free_port

Answer = Callable[[dict[str, Any]], tuple[int, Any]]


class _Server:
    def __init__(self, answer: Answer, delay: float = 0.0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.bodies.append(body)
                    outer.headers.append(dict(self.headers))
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                time.sleep(delay)
                status, data = answer(body)
                with lock:
                    outer.in_flight -= 1
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/completions"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., _Server]]:
    servers: list[_Server] = []

    def start(answer: Answer, delay: float = 0.0) -> _Server:
        servers.append(_Server(answer, delay))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _text_answer(body: dict[str, Any]) -> tuple[int, Any]:
    prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
    return 200, {"choices": [{"index": i, "text": " hello", "logprobs": None} for i in range(len(prompts))]}


def test_retries_5xx_and_429_with_backoff_then_answers(serve: Callable[..., _Server]) -> None:
    statuses = iter([503, 429, 200])
    server = serve(lambda body: (next(statuses), {"choices": [{"index": 0, "text": "ok"}]}))
    slept: list[float] = []
    client = APIClient(server.url, api_key="k", max_retries=3, sleep=slept.append)
    assert client.post({"prompt": "x"}) == {"choices": [{"index": 0, "text": "ok"}]}
    assert len(server.bodies) == 3 and slept == [backoff_seconds(1), backoff_seconds(2)] == [1.0, 2.0]


def test_a_400_is_not_retried_and_names_the_server_message(serve: Callable[..., _Server]) -> None:
    server = serve(lambda body: (400, {"error": {"message": "prompt too long"}}))
    with pytest.raises(UserError, match="rejected a request \\(HTTP 400\\).*prompt too long"):
        APIClient(server.url, api_key="k", max_retries=3, sleep=lambda s: None).post({"prompt": "x"})
    assert len(server.bodies) == 1


def test_concurrency_is_bounded_and_order_kept(serve: Callable[..., _Server]) -> None:
    server = serve(lambda body: (200, {"n": body["n"]}), delay=0.15)
    client = APIClient(server.url, api_key="k", num_concurrent=3)
    started = time.perf_counter()
    answers = client.post_all([{"n": i} for i in range(9)])
    elapsed = time.perf_counter() - started
    assert [a["n"] for a in answers] == list(range(9))
    assert server.max_in_flight == 3
    assert elapsed < 9 * 0.15 * 0.75  # overlapped, not serial


def test_unreachable_endpoint_is_one_sentence_with_url_and_last_error_exit_3() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/completions"
    client = APIClient(url, api_key="k", max_retries=2, sleep=lambda s: None)
    with pytest.raises(EndpointError) as caught:
        client.post({"prompt": "x"})
    message = str(caught.value)
    assert url in message and "after 2 attempt(s)" in message and "Connection" in message
    assert caught.value.exit_code == 3


def test_refused_key_names_the_secret_never_the_key(
    serve: Callable[..., _Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(lambda body: (401, {"error": "bad key"}))
    monkeypatch.setenv("ASSAY_API_KEY_SECRET", "team-llm-key")
    with pytest.raises(UserError) as caught:
        APIClient(server.url, api_key="sk-very-secret", max_retries=3).post({"prompt": "x"})
    assert "team-llm-key" in str(caught.value) and "sk-very-secret" not in str(caught.value)
    assert len(server.bodies) == 1 and server.headers[0]["Authorization"] == "Bearer sk-very-secret"


def _lm(url: str, shared_data: Path, **extra: Any) -> Any:
    from assay.runner.models.api.completions import CompletionsLM

    return CompletionsLM(
        base_url=url,
        model="m",
        tokenizer=str(shared_data / "gpt2_tokenizer"),
        tokenizer_backend="huggingface",
        max_retries=1,
        **extra,
    )


def test_server_without_prompt_logprobs_loglikelihood_says_so_generation_runs(
    serve: Callable[..., _Server], shared_data: Path
) -> None:
    server = serve(_text_answer)
    lm = _lm(server.url, shared_data)
    with pytest.raises(UserError, match="need a server that echoes prompt logprobs.*generation tasks still run"):
        lm.loglikelihood([LoglikelihoodRequest("The cat", " sat")], disable_tqdm=True)
    out = lm.generate_until([GenerationRequest("Hi", {"until": ["\n"], "max_gen_toks": 5})], disable_tqdm=True)
    assert out == [" hello"]
    body = server.bodies[-1]
    assert body["max_tokens"] == 5 and body["stop"] == ["\n", "<|endoftext|>"] and body["temperature"] == 0
    assert body["prompt"] == [lm.tokenizer.encode("Hi")]


def test_loglikelihood_payload_and_parse(serve: Callable[..., _Server], shared_data: Path) -> None:
    """echo + logprobs=1 + max_tokens=1; the sum skips the context and the generated token."""

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        tokens = body["prompt"][0]
        logprobs = [None] + [-0.5] * (len(tokens) - 1) + [-9.0]
        tops = [None] + [{"a": -0.5}] * (len(tokens) - 2) + [{"b": -0.1}, {"c": -1.0}]
        return 200, {
            "choices": [{"index": 0, "text": "", "logprobs": {"token_logprobs": logprobs, "top_logprobs": tops}}]
        }

    server = serve(answer)
    lm = _lm(server.url, shared_data)
    ctx, cont = lm.tokenizer.encode("The cat"), lm.tokenizer.encode(" sat on")
    [result] = lm.loglikelihood([LoglikelihoodRequest("The cat ", "sat on")], disable_tqdm=True)
    assert (
        server.bodies[0]["echo"] is True and server.bodies[0]["logprobs"] == 1 and server.bodies[0]["max_tokens"] == 1
    )
    assert server.bodies[0]["prompt"] == [ctx + cont]
    assert result.logprob == pytest.approx(-0.5 * len(cont)) and result.is_greedy is False


def test_cli_unreachable_endpoint_exits_3_with_one_sentence(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers import write_parity_tasks

    tasks = write_parity_tasks(tmp_path / "tasks", shared_data, tmp_path / "work")
    url = f"http://127.0.0.1:{free_port()}/v1/completions"
    args = (
        f"base_url={url},model=m,tokenizer={shared_data / 'gpt2_tokenizer'},tokenizer_backend=huggingface,max_retries=1"
    )
    code = cli.main(
        [
            "run",
            "--model",
            "local-completions",
            "--model_args",
            args,
            "--tasks",
            "p_lambada",
            "--include_path",
            str(tasks),
            "--limit",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    errors = [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(errors) == 1 and url in errors[0] and "Connection refused" in errors[0] and "Traceback" not in err


def test_unknown_model_arg_and_chat_loglikelihood_are_one_sentence(shared_data: Path) -> None:
    from assay.runner.models.api.chat import ChatCompletionsLM

    with pytest.raises(UserError, match="Unknown model_arg 'num_concurent'.*num_concurrent"):
        _lm("http://127.0.0.1:1/v1/completions", shared_data, num_concurent=2)
    chat = ChatCompletionsLM(base_url="http://127.0.0.1:1/v1/chat/completions", model="m")
    with pytest.raises(UserError, match="generation tasks only"):
        chat.loglikelihood([LoglikelihoodRequest("a", " b")])
