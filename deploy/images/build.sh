#!/usr/bin/env bash
# Build Assay's images from deploy/images/Dockerfile with podman, buildah or docker.
#
#   deploy/images/build.sh                                   # both, tagged ghcr.io/assay-dev/assay-{operator,runner}:<version>
#   deploy/images/build.sh --push registry.example.com/team  # build, tag for that registry and push
#   deploy/images/build.sh --target operator --build-arg BASE=localhost/assay-base:bookworm  # pinned to its digest
#   deploy/images/build.sh --target runner-vllm              # the runner with vLLM (CUDA wheels)
#   deploy/images/build.sh --target runner-vllm --build-arg VLLM_FLAVOR=cpu  # vLLM's CPU build
#
# Options: --repo R (default ghcr.io/assay-dev), --push R (repo R, then push), --tag T
# (default: the version in pyproject.toml), --target operator|runner|runner-vllm (repeatable;
# default operator and runner), --build-arg K=V (passed through, repeatable), --revision SHA
# (default: git HEAD), --builder podman|buildah|docker (default: the first installed; or $ASSAY_IMAGE_BUILDER),
# --wheelhouse DIR|none (podman/buildah: a host directory of downloaded wheels mounted into
# the build, so warm rebuilds download nothing; default ~/.cache/assay/wheels), --sbom-dir DIR
# (default dist/ in the repository), and after `--` any further options for the builder.
#
# The base is pinned by digest: BASE (default: the Dockerfile's, by digest) must be given as
# name@sha256:<digest>, or be an image the builder holds, which build.sh pins to the digest it
# has; a tag alone is refused. Each image gets a CycloneDX SBOM of its venv, in the image at
# /opt/assay/share/sbom.cdx.json and exported to DIR/assay-<target>-<tag>.cdx.json, and the
# label dev.assay.sbom.sha256 (that file's sha256), beside OCI's base.name and base.digest.
# Build output goes to stderr; stdout gets one line per image: `<target> <tag>`.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dockerfile="$here/Dockerfile"

repo="ghcr.io/assay-dev"
push=""
tag=""
targets=()
build_args=()
extra=()
revision=""
builder="${ASSAY_IMAGE_BUILDER:-}"
wheelhouse="${ASSAY_WHEELHOUSE:-$HOME/.cache/assay/wheels}"
sbom_dir="${ASSAY_SBOM_DIR:-$root/dist}"

die() { echo "build.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) repo="${2:?--repo needs a value}"; shift 2 ;;
    --push) push=1; repo="${2:?--push needs a registry, e.g. registry.example.com/team}"; shift 2 ;;
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    --target) targets+=("${2:?--target needs operator, runner or runner-vllm}"); shift 2 ;;
    --build-arg) build_args+=(--build-arg "${2:?--build-arg needs K=V}"); shift 2 ;;
    --build-arg=*) build_args+=(--build-arg "${1#--build-arg=}"); shift ;;
    --revision) revision="${2:?--revision needs a value}"; shift 2 ;;
    --builder) builder="${2:?--builder needs podman, buildah or docker}"; shift 2 ;;
    --wheelhouse) wheelhouse="${2:?--wheelhouse needs a directory or none}"; shift 2 ;;
    --sbom-dir) sbom_dir="${2:?--sbom-dir needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo pipefail$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(operator runner)
for t in "${targets[@]}"; do
  case "$t" in operator|runner|runner-vllm) ;; *) die "unknown target $t: use operator, runner or runner-vllm" ;; esac
done

version="$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$root/pyproject.toml" | head -n 1)"
[ -n "$version" ] || die "no version found in $root/pyproject.toml"
tag="${tag:-$version}"
if [ -z "$revision" ] && command -v git >/dev/null; then
  revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || true)"
fi

if [ -z "$builder" ]; then
  for candidate in podman buildah docker; do
    if command -v "$candidate" >/dev/null; then builder="$candidate"; break; fi
  done
fi
[ -n "$builder" ] || die "no image builder found: install podman, buildah or docker"
command -v "$builder" >/dev/null || die "builder $builder is not installed"

case "$builder" in
  podman) build=(podman build --layers) ;;
  buildah) build=(buildah build --layers) ;;
  docker) build=(docker build); export DOCKER_BUILDKIT=1 ;;
  *) die "unknown builder $builder: use podman, buildah or docker" ;;
esac
cache=()
if [ "$builder" != docker ] && [ "$wheelhouse" != none ]; then
  mkdir -p "$wheelhouse"
  cache=(--volume "$wheelhouse:/var/cache/assay-wheels" --build-arg WHEELHOUSE=/var/cache/assay-wheels)
fi

# The base by digest: a tag can move under the same build, a digest cannot.
base="$(sed -n 's/^ARG BASE=//p' "$dockerfile" | head -n 1)"
other_args=()
for ((i = 0; i < ${#build_args[@]}; i += 2)); do
  case "${build_args[i+1]}" in
    BASE=*) base="${build_args[i+1]#BASE=}" ;;
    *) other_args+=("${build_args[i]}" "${build_args[i+1]}") ;;
  esac
done
pin_base() {
  local ref="$1" name="$1" digest=""
  if [[ "$ref" =~ @sha256:[0-9a-f]{64}$ ]]; then echo "$ref"; return; fi
  [[ "${ref##*/}" != *:* ]] || name="${ref%:*}"  # drop the tag, not a registry's port
  case "$builder" in
    podman) digest="$(podman image inspect --format '{{.Digest}}' "$ref" 2>/dev/null || true)" ;;
    buildah) digest="$(buildah inspect --type image --format '{{.FromImageDigest}}' "$ref" 2>/dev/null || true)" ;;
    docker) digest="$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$ref" 2>/dev/null \
                      | sed -n 's/^[^@]*@//p' | head -n 1 || true)" ;;
  esac
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "BASE=$ref is a tag, which can move: give the base by digest (BASE=name@sha256:<digest>), or pull or build it first so that build.sh pins it to the digest $builder has."
  echo "$name@$digest"
}
pinned="$(pin_base "$base")" || exit 2
[ "$pinned" = "$base" ] || echo "build.sh: BASE $base pinned to $pinned" >&2
build_args=("${other_args[@]}" --build-arg "BASE=$pinned")
labels=(--label "org.opencontainers.image.version=$version"
        --label "org.opencontainers.image.base.name=$pinned" --label "org.opencontainers.image.base.digest=${pinned##*@}")
[ -z "$revision" ] || labels+=(--label "org.opencontainers.image.revision=$revision")

# The Dockerfile line of the step a failed build stopped at: podman/buildah print each step
# as `[stage/n] STEP i/m: <instruction, continuation lines joined>`, stages as `FROM ... AS name`.
failed_line() {
  command -v python3 >/dev/null || return 0
  python3 - "$1" "$dockerfile" <<'PY'
import re, sys
log, dockerfile = open(sys.argv[1], errors="replace").read(), open(sys.argv[2]).read().splitlines()
# Stages may interleave in the log (a stage builds the one it copies from on demand): find
# the failed step's stage by its [k/n] prefix.
steps = re.findall(r"^(?:\[(\d+)/\d+\] )?STEP \d+/\d+: (.*)", log, re.M)
if not steps:
    sys.exit()
norm = lambda s: " ".join(s.split())
index, failed = steps[-1]
stage = next((m.group(1) for k, s in steps if k == index and (m := re.match(r"FROM \S+ AS (\S+)", s))), None)
failed, start = norm(failed), 0
if stage:
    start = next((i for i, l in enumerate(dockerfile) if re.match(rf"FROM \S+ AS {re.escape(stage)}\s*$", l)), 0)
i = start
while i < len(dockerfile):
    first, text = i, dockerfile[i]
    while text.endswith("\\") and i + 1 < len(dockerfile):
        i += 1
        text = text[:-1] + " " + dockerfile[i]
    if norm(text) == failed or (failed.startswith("FROM") and norm(text).split()[:1] == ["FROM"] and first >= start):
        print(first + 1)
        break
    i += 1
PY
}

# One build of `target` with the given options; on failure, the Dockerfile line and exit 1.
run_build() {
  local target="$1" rc line
  shift
  set +e
  "${build[@]}" -f "$dockerfile" "$@" --build-arg "VERSION=$version" "${build_args[@]}" "${cache[@]}" \
    "${extra[@]}" "$root" 2>&1 | tee "$log" >&2
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    line="$(failed_line "$log" || true)"
    echo "build.sh: $builder build of target $target failed${line:+ at Dockerfile line $line} (exit $rc); the failing step's output is above." >&2
    exit 1
  fi
}

# The sha256 of the SBOM inside a built image, read by running the image (no network).
image_sbom_sha256() {
  local c
  case "$builder" in
    podman|docker) "$builder" run --rm --network none --entrypoint sha256sum "$1" /opt/assay/share/sbom.cdx.json ;;
    buildah) c="$(buildah from "$1")"; buildah run "$c" -- sha256sum /opt/assay/share/sbom.cdx.json; buildah rm "$c" >/dev/null ;;
  esac | cut -d' ' -f1
}

log="$(mktemp)"
exported="$(mktemp -d)"
trap 'rm -rf "$log" "$log.step" "$exported"' EXIT
mkdir -p "$sbom_dir"
built=()
for target in "${targets[@]}"; do
  image="$repo/assay-$target:$tag"
  sbom="$sbom_dir/assay-$target-$tag.cdx.json"
  echo "build.sh: $builder build --target $target -t $image" >&2
  start=$SECONDS
  # First the stage that holds only the SBOM, exported; then the image, whose layers that
  # build left in the cache, labelled with the SBOM's sha256.
  run_build "$target" --target "$target-sbom" --output "type=local,dest=$exported/$target"
  cp "$exported/$target/sbom.cdx.json" "$sbom"
  sha="$(sha256sum "$sbom" | cut -d' ' -f1)"
  run_build "$target" --target "$target" -t "$image" "${labels[@]}" --label "dev.assay.sbom.sha256=$sha"
  inside="$(image_sbom_sha256 "$image" || true)"
  if [ "$inside" != "$sha" ]; then
    echo "build.sh: the SBOM in $image (sha256 ${inside:-unreadable}) is not the one exported to $sbom ($sha); rebuild with --no-cache." >&2
    exit 1
  fi
  echo "build.sh: built $image in $((SECONDS - start)) s; its SBOM: $sbom (sha256 $sha)" >&2
  built+=("$target $image")
done

if [ -n "$push" ]; then
  for entry in "${built[@]}"; do
    image="${entry#* }"
    echo "build.sh: pushing $image" >&2
    "$builder" push "$image" >&2 || { echo "build.sh: $builder push $image failed." >&2; exit 1; }
  done
fi
printf '%s\n' "${built[@]}"
