#!/bin/sh
# The system libraries the runner-vllm image's flavor loads (deploy/images/Dockerfile):
#
#   vllm_system.sh FLAVOR
#
# cpu: vLLM's CPU kernels (vllm._C) link libnuma, and its CPU sampler is a torch.compile'd
# function that inductor builds with g++ and Python's headers at run time (into /tmp), even
# with enforce_eager; vLLM's own CPU image ships them too. cuda: nothing from apt.
# Its own file and layer, after the wheels: changing it does not reinstall them.
set -eu
if [ "$1" = cpu ]; then
  packages="libnuma1 g++"
  headers="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"
  [ -f "$headers" ] || packages="$packages python3-dev"
  # shellcheck disable=SC2086
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
fi
