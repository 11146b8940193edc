#!/usr/bin/env bash
# Regenerate the images' lock files: every package an image installs, pinned, with the sha256
# of each of its files on PyPI, resolved for linux x86_64 and CPython 3.11 (the Python of the
# base images: python:3.11-slim-bookworm and Debian bookworm's python3). The Dockerfile
# installs from these with `pip --require-hashes`, so a changed or substituted file fails the build.
#
#   deploy/images/lock.sh              # keep each current pin that still satisfies pyproject.toml
#   deploy/images/lock.sh --upgrade    # the newest versions pyproject.toml allows
#
#   operator.lock.txt   core + the `operator` extra
#   runner.lock.txt     core + the `runner` extra (PyPI's torch: the CUDA build on Linux)
#   build.lock.txt      pyproject.toml's [build-system] requires (builds Assay's wheel)
#   sbom.lock.txt       sbom.in: cyclonedx-bom, which writes each image's SBOM
#
# Needs uv (`pip install uv`) and network access to PyPI. tests/project/test_image_locks.py checks,
# offline, that every requirement in pyproject.toml is pinned in its lock with hashes.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
uv="${UV:-uv}"
command -v "$uv" >/dev/null || { echo "lock.sh: uv is not installed: pip install uv (or set UV to its path)." >&2; exit 2; }
upgrade=()
case "${1:-}" in
  --upgrade) upgrade=(--upgrade) ;;
  "") ;;
  *) echo "lock.sh: unknown option $1 (use --upgrade or nothing)." >&2; exit 2 ;;
esac

# One resolution per lock, on stdin; -o keeps the lock's current pins as preferences.
compile() {
  "$uv" pip compile - -q --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
    --custom-compile-command "deploy/images/lock.sh" "${upgrade[@]}" -o "$here/$1"
}
python3 "$here/requirements.py" "$root/pyproject.toml" operator | compile operator.lock.txt
python3 "$here/requirements.py" "$root/pyproject.toml" runner | compile runner.lock.txt
python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' \
  "$root/pyproject.toml" | compile build.lock.txt
compile sbom.lock.txt < "$here/sbom.in"
echo "lock.sh: wrote operator, runner, build and sbom locks under deploy/images/" >&2
