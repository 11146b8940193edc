"""docs/images/dashboard.svg: three of the Grafana dashboard's panels over real runs (regenerate it with this script).

    python bench/dashboard_image.py [OUT.svg] [--prometheus PATH]

Not a Grafana screenshot. What it does, each step real:
1. builds three tiny randomly initialised GPT-2 models (examples/make_tiny_model.py's byte-level
   tokenizer; 1, 2 and 4 layers) and imports the repository's ARC sample (examples/sample-data);
2. runs three Evaluations with `assay apply --local` (arc_easy, 40 documents; arc_challenge, 10),
   reading each one's status as the runner reports it;
3. hands those statuses to the operator's metrics (EvaluationMetrics.observe), serves them on
   /metrics, and lets a real Prometheus scrape them;
4. evaluates the chosen panels' own PromQL (deploy/helm/assay/dashboards/assay.json, the
   variables at "All") through Prometheus's query API, and draws the answers as SVG.
The models are random, so the scores are chance-level noise; the point is the panels' shape.
The Prometheus binary is `--prometheus`, else `prometheus` on PATH, else the e2e suite's.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "images" / "dashboard.svg"
DASHBOARD = REPO / "deploy" / "helm" / "assay" / "dashboards" / "assay.json"
PANELS = ("Score by task and model", "Leaderboard: score per model, revision and task", "Evaluations by phase")
MODELS = {"tiny-1-layer": 1, "tiny-2-layers": 2, "tiny-4-layers": 4}
COLOURS = ("#5794f2", "#73bf69", "#ff9830")


def make_models(work: Path) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    import torch
    from make_tiny_model import byte_level_tokenizer  # type: ignore[import-not-found]
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = byte_level_tokenizer()
    for seed, (name, layers) in enumerate(MODELS.items()):
        torch.manual_seed(seed)
        end = tokenizer.eos_token_id
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=1024,
            n_embd=64,
            n_layer=layers,
            n_head=2,
            bos_token_id=end,
            eos_token_id=end,
        )
        GPT2LMHeadModel(config).save_pretrained(work / name)
        tokenizer.save_pretrained(work / name)


def run_evaluations(work: Path) -> list[dict[str, Any]]:
    """The three Evaluations, run here; each as the operator would see it (metadata, spec, status)."""
    from assay.runner.data import importer

    importer.import_benchmarks(REPO / "examples" / "sample-data", work / "datasets", ["arc"])
    manifests = [
        {
            "apiVersion": "assay.dev/v1alpha1",
            "kind": "Evaluation",
            "metadata": {"name": f"{name}-arc", "namespace": "team-a", "labels": {"assay.dev/suite": "smoke"}},
            "spec": {
                "model": "hf",
                "modelArgs": {"pretrained": name, "dtype": "float32", "device": "cpu"},  # under `work`, the cwd
                "tasks": ["arc_easy", "arc_challenge"],
                "batchSize": 8,
                "seed": 1234,
            },
        }
        for name in MODELS
    ]
    (work / "evaluations.yaml").write_text(yaml.safe_dump_all(manifests))
    env = {**os.environ, "ASSAY_DATASETS_DIR": str(work / "datasets"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "assay", "apply", "-f", "evaluations.yaml", "--local", "-o", "out"]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"assay apply --local failed:\n{done.stderr[-3000:]}")
    statuses = [document["status"] for document in yaml.safe_load_all(done.stdout) if document]
    return [{**manifest, "status": status} for manifest, status in zip(manifests, statuses, strict=False)]


def prometheus_binary(given: str | None) -> str:
    found = (
        given or shutil.which("prometheus") or next(iter(Path.home().glob(".cache/assay/k8s/*/bin/prometheus")), None)
    )
    if not found:
        raise SystemExit("No Prometheus binary: pass --prometheus PATH (a release from prometheus.io/download).")
    return str(found)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return list(json.loads(response.read())["data"]["result"])


def panel_answers(evaluations: list[dict[str, Any]], binary: str, work: Path) -> dict[str, list[dict[str, Any]]]:
    """Each chosen panel's first target, evaluated by a real Prometheus scraping the operator's metrics."""
    from assay.operator.runtime.metrics import EvaluationMetrics

    metrics = EvaluationMetrics()
    for evaluation in evaluations:
        metrics.observe(evaluation)
    server, thread = metrics.start_server(0, addr="127.0.0.1")
    config = work / "prometheus.yml"
    scrape = {"job_name": "assay-operator", "honor_labels": True}
    scrape["static_configs"] = [{"targets": [f"127.0.0.1:{server.server_port}"]}]
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]}))
    port = server.server_port + 1
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    panels = {panel["title"]: panel for panel in json.loads(DASHBOARD.read_text())["panels"]}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if query(base, "assay_evaluation_info"):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit("Prometheus did not scrape the metrics within 60 s.")
        # Grafana's "All" for every variable: any value matches.
        return {t: query(base, re.sub(r"\$\{?\w+\}?", ".*", panels[t]["targets"][0]["expr"])) for t in PANELS}
    finally:
        process.terminate()
        process.wait(15)
        server.shutdown()
        thread.join(timeout=5)


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "start", weight: str = "normal") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
        f'fill="#d8d9da">{html.escape(text)}</text>'
    )


def _panel(x: float, y: float, w: float, h: float, title: str) -> str:
    frame = f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="#181b1f" stroke="#2c3235"/>'
    return frame + _text(x + 10, y + 20, title, 13, weight="bold")


def bar_panel(x: float, y: float, rows: list[dict[str, Any]]) -> str:
    """ "Score by task and model": grouped bars, one group per task and metric, one colour per model."""
    w, h = 560.0, 300.0
    models = sorted({r["metric"]["model"] for r in rows})
    groups = sorted({(r["metric"]["task"], r["metric"]["metric"]) for r in rows})
    value = {(r["metric"]["task"], r["metric"]["metric"], r["metric"]["model"]): float(r["value"][1]) for r in rows}
    parts = [_panel(x, y, w, h, PANELS[0])]
    left, bottom, top = x + 40, y + h - 50, y + 40
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        ty = bottom - tick * (bottom - top)
        parts.append(f'<line x1="{left}" y1="{ty:.1f}" x2="{x + w - 10}" y2="{ty:.1f}" stroke="#2c3235"/>')
        parts.append(_text(left - 6, ty + 4, f"{tick:g}", 10, "end"))
    slot = (x + w - 10 - left) / max(1, len(groups))
    bar = slot * 0.8 / max(1, len(models))
    for g, (task, metric) in enumerate(groups):
        for m, model in enumerate(models):
            v = value.get((task, metric, model), 0.0)
            bx = left + g * slot + slot * 0.1 + m * bar
            parts.append(
                f'<rect x="{bx:.1f}" y="{bottom - v * (bottom - top):.1f}" width="{bar - 2:.1f}" '
                f'height="{v * (bottom - top):.1f}" fill="{COLOURS[m % len(COLOURS)]}"/>'
            )
        parts.append(_text(left + g * slot + slot / 2, bottom + 16, f"{task} {metric}", 10, "middle"))
    for m, model in enumerate(models):
        parts.append(f'<rect x="{left + m * 150}" y="{y + h - 20}" width="10" height="10" fill="{COLOURS[m]}"/>')
        parts.append(_text(left + m * 150 + 14, y + h - 11, model, 10))
    return "".join(parts)


def leaderboard_panel(x: float, y: float, rows: list[dict[str, Any]]) -> str:
    w = 560.0
    header = ("model", "task", "metric", "filter", "score")
    lines = sorted(
        (r["metric"]["model"], r["metric"]["task"], r["metric"]["metric"], r["metric"]["filter"], float(r["value"][1]))
        for r in rows
    )
    h = 50 + 18 * (len(lines) + 1)
    columns = (x + 10, x + 150, x + 270, x + 360, x + w - 20)
    parts = [_panel(x, y, w, h, PANELS[1])]
    for cx, name in zip(columns, header, strict=False):
        parts.append(_text(cx, y + 44, name, 11, "end" if name == "score" else "start", "bold"))
    for i, line in enumerate(lines):
        ly = y + 62 + 18 * i
        for cx, cell in zip(columns[:4], line[:4], strict=False):
            parts.append(_text(cx, ly, str(cell), 11))
        parts.append(_text(columns[4], ly, f"{line[4]:.4f}", 11, "end"))
    return "".join(parts)


def phase_panel(x: float, y: float, rows: list[dict[str, Any]]) -> str:
    w, h = 560.0, 110.0
    parts = [_panel(x, y, w, h, PANELS[2])]
    counts = sorted((r["metric"]["phase"], int(float(r["value"][1]))) for r in rows)
    for i, (phase, count) in enumerate(counts):
        cx = x + 10 + i * (w - 20) / max(1, len(counts))
        parts.append(_text(cx + 50, y + 68, str(count), 32, "middle", "bold"))
        parts.append(_text(cx + 50, y + 92, phase, 11, "middle"))
    return "".join(parts)


def render(answers: dict[str, list[dict[str, Any]]]) -> str:
    leaderboard = leaderboard_panel(10, 330, answers[PANELS[1]])
    board_height = 50 + 18 * (len(answers[PANELS[1]]) + 1)
    phases = phase_panel(10, 340 + board_height, answers[PANELS[2]])
    height = 340 + board_height + 120 + 36
    note = "Drawn from the dashboard's own PromQL, answered by Prometheus over three real runs of random tiny models;"
    note2 = "not a Grafana screenshot (bench/dashboard_image.py)."
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="580" height="{height}" font-family="Helvetica, Arial, sans-serif">'
        f'<rect width="580" height="{height}" fill="#111217"/>'
        + bar_panel(10, 20, answers[PANELS[0]])
        + leaderboard
        + phases
        + _text(10, 13, "Assay evaluations (Grafana dashboard, three panels)", 11)
        + _text(10, height - 20, note, 10)
        + _text(10, height - 7, note2, 10)
        + "</svg>\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default=str(OUT))
    parser.add_argument("--prometheus", help="the Prometheus binary")
    args = parser.parse_args()
    binary = prometheus_binary(args.prometheus)
    with tempfile.TemporaryDirectory(prefix="assay-dashboard-") as tmp:
        work = Path(tmp)
        make_models(work)
        answers = panel_answers(run_evaluations(work), binary, work)
    if not all(answers.values()):
        raise SystemExit(f"A panel's query answered nothing: {[t for t, rows in answers.items() if not rows]}")
    Path(args.out).write_text(render(answers))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
