"""The sentinels through whole `assay run`s against a real OpenAI-compatible server on loopback.

The server (stdlib http.server in a thread) answers /v1/completions as a broken endpoint
does: every prompt token's logprob the same, so every choice of a document scores alike
(llama.cpp's server without echoed prompt logprobs), and most generations empty. The runs
go through Assay's real `local-completions` backend, on small tasks over local files, and
their findings are read where a user reads them: the results JSON, the table, the exit
code, and `assay check` on the output folder. A model that scores the right answer lowest
brings a four-way multiple choice task to 0.07 through the real pipeline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.runner.evaluator import simple_evaluate
from assay.runner.models.instance import LoglikelihoodResult
from assay.runner.models.lm import LM
from assay.runner.tasks.index import TaskManager

Answer = Callable[[dict[str, Any], int], dict[str, Any]]

MC_TASK = """task: sentinel_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{q}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
metadata:
  version: 1.0
"""

GEN_TASK = """task: sentinel_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{q}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
metric_list:
  - metric: exact_match
metadata:
  version: 1.0
"""

WORDS = ["red", "green", "blue", "yellow", "seven", "river", "stone", "cloud"]


def _equal_logprobs(body: dict[str, Any], number: int) -> dict[str, Any]:
    """An echo-less server: a logprob of 0 for every prompt token, so every choice, whatever
    its length, sums alike."""
    if body.get("echo"):
        return {"choices": [_scored(prompt, lambda token: 0.0) for prompt in body["prompt"]]}
    # generations: three of every five empty
    return {"choices": [{"index": 0, "text": "" if number % 5 < 3 else " blue", "finish_reason": "stop"}]}


def _healthy(body: dict[str, Any], number: int) -> dict[str, Any]:
    """Logprobs that depend on the token, and answers that are never empty."""
    if body.get("echo"):
        return {"choices": [_scored(prompt, lambda token: -((token * 7919) % 13) / 3.0) for prompt in body["prompt"]]}
    return {"choices": [{"index": 0, "text": " blue", "finish_reason": "stop"}]}


def _scored(prompt: list[int], logprob: Callable[[int], float]) -> dict[str, Any]:
    values = [None] + [logprob(token) for token in prompt[1:]] + [-0.5]
    tops = [None] + [{"t": value} for value in values[1:]]
    return {"index": 0, "text": "", "logprobs": {"token_logprobs": values, "top_logprobs": tops}}


@pytest.fixture
def server() -> Iterator[Callable[[Answer], str]]:
    started: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        count = iter(range(10**9))
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    number = next(count)
                raw = json.dumps(answer(body, number)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1/completions"

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    root.mkdir()
    mc = [
        # choices of one to four words: equal sums are not equal lengths
        {
            "q": f"Which word is number {i}?",
            "choices": [" ".join([WORDS[(i + j) % 8]] * (j + 1)) for j in range(4)],
            "label": i % 4,
        }
        for i in range(24)
    ]
    gen = [{"q": f"Say the colour {WORDS[i % 4]}.", "answer": WORDS[i % 4]} for i in range(10)]
    for name, rows, template in (("mc", mc, MC_TASK), ("gen", gen, GEN_TASK)):
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        (root / f"{name}.yaml").write_text(template.format(data=data))
    return root


def _run(url: str, shared_data: Path, task_dir: Path, out: Path, *extra: str) -> int:
    args = f"base_url={url},model=m,tokenizer={shared_data / 'gpt2_tokenizer'},tokenizer_backend=huggingface"
    argv = ["run", "--model", "local-completions", "--model_args", args, "--tasks", "sentinel_mc,sentinel_gen"]
    argv += ["--include_path", str(task_dir), "--output_path", str(out), "--log_samples", *extra]
    return cli.main(argv)


def _results(out: Path) -> dict[str, Any]:
    [path] = out.rglob("results_*.json")
    results: dict[str, Any] = json.loads(path.read_text())
    return results


def test_an_echo_less_server_and_empty_answers_make_the_scores_untrusted(
    server: Callable[[Answer], str],
    shared_data: Path,
    task_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    assert _run(server(_equal_logprobs), shared_data, task_dir, out) == 0  # not strict: the run still succeeds
    printed = capsys.readouterr().out
    block = _results(out)["sentinels"]
    assert block["trusted"] is False
    mc = block["tasks"]["sentinel_mc"]["checks"]
    assert mc["degenerate"]["passed"] is False and mc["degenerate"]["all_choices_equal"] == 1.0
    assert mc["below_chance"]["passed"] is True  # ties go to the first choice: a quarter right, at chance
    gen = block["tasks"]["sentinel_gen"]["checks"]
    assert gen["empty"]["passed"] is False and gen["empty"]["fraction"] == pytest.approx(0.6)
    assert block["served"]["requests"] > 0 and block["served"]["checks"]["retried"]["passed"] is True

    assert "|sentinel_mc ⚠" in printed and "|sentinel_gen ⚠" in printed
    assert "⚠ sentinel_mc: 100% of 24 documents scored every choice alike" in printed
    assert "⚠ sentinel_gen: 60% of 10 answers are empty (limit 50%)." in printed

    assert cli.main(["check", str(out)]) == 1
    report = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in report.splitlines() if line.startswith("|")]
    assert ["sentinel_mc", "below_chance", "passed"] == rows[2][:3] and ["", "degenerate", "FAILED"] == rows[3][:3]
    assert any(row[:3] == ["(served model)", "retried", "passed"] and "requests" in row[3] for row in rows)
    assert report.rstrip().endswith("Scores NOT trusted: a check failed.")
    assert cli.main(["check", str(out), "--format", "json"]) == 1
    rechecked = json.loads(capsys.readouterr().out)
    assert rechecked["tasks"] == block["tasks"]  # the files say what the run said


def test_strict_sentinels_fail_the_run(
    server: Callable[[Answer], str],
    shared_data: Path,
    task_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    assert _run(server(_equal_logprobs), shared_data, task_dir, out, "--sentinels", "strict=true") == 1
    assert "the scores are not trusted" in capsys.readouterr().err
    assert _results(out)["sentinels"]["trusted"] is False  # the scores are still written


def test_a_healthy_server_raises_no_alarm_and_off_writes_no_block(
    server: Callable[[Answer], str],
    shared_data: Path,
    task_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = server(_healthy)
    assert _run(url, shared_data, task_dir, tmp_path / "out") == 0
    block = _results(tmp_path / "out")["sentinels"]
    assert block["trusted"] is True, block
    assert "⚠" not in capsys.readouterr().out
    assert cli.main(["check", str(tmp_path / "out")]) == 0
    assert _run(url, shared_data, task_dir, tmp_path / "off", "--sentinels", "off") == 0
    assert "sentinels" not in _results(tmp_path / "off")


class _WrongAnswers(LM):
    """A model that scores the right answer lowest: what an engine scoring garbage can look like."""

    def loglikelihood(self, requests: Any, *, disable_tqdm: bool = False) -> list[LoglikelihoodResult]:
        return [
            LoglikelihoodResult(-50.0 if "right" in r.continuation else -1.0 - len(r.continuation) / 100, False)
            for r in requests
        ]

    def loglikelihood_rolling(self, requests: Any, *, disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError

    def generate_until(self, requests: Any, *, disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError


def test_seven_percent_on_four_way_multiple_choice_is_below_chance(tmp_path: Path) -> None:
    """olmo-eval's vLLM out of memory in prompt_logprobs: MMLU at 0.069 with exit 0."""
    choices = ["right", "wrong", "wrong twice", "wrong three times"]
    # 93 documents whose answer is "right" (scored lowest), 7 whose answer is "wrong" (scored highest)
    rows = [{"q": f"Question {i}?", "choices": choices, "label": 1 if i % 100 < 7 else 0} for i in range(100)]
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "mc.yaml").write_text(MC_TASK.format(data=data))
    results = simple_evaluate(_WrongAnswers(), tasks=["sentinel_mc"], task_manager=TaskManager(str(tmp_path)))
    assert results is not None and results["results"]["sentinel_mc"]["acc,none"] == pytest.approx(0.07)
    finding = results["sentinels"]["tasks"]["sentinel_mc"]["checks"]["below_chance"]
    assert finding["passed"] is False and finding["p_value"] < 1e-5 and results["sentinels"]["trusted"] is False
    assert finding["reason"].startswith("accuracy 0.070 on 100 documents is significantly below the chance of 0.250")
