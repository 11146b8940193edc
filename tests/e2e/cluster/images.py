"""Real container images for the e2e node: the base, the pause image, Assay's own images.

No registry is reachable here, so everything is built locally with podman and handed to
containerd directly (measured facts: /work/shared/REAL_NODE.md):

- `ensure_base_image()`: Debian bookworm (debootstrap, minbase) with python3 and the
  host's CA bundle, as `localhost/assay-base:bookworm`; pip inside image builds needs that
  bundle because outbound HTTPS goes through an inspecting proxy. Never committed.
- `ensure_pause_image()`: the CRI sandbox image, compiled from the Kubernetes module's
  `build/pause/linux/pause.c` into a scratch image `localhost/pause:3.10`.
- `build_images(base)`: `deploy/images/build.sh` with that base, by digest; returns target → tag.
- `import_into_containerd(tags, address=...)`: `podman save | ctr images import -`,
  skipping images containerd already has with the same image ID.

Every function is idempotent and cheap when its result exists: the debootstrap rootfs is
cached under ~/.cache/assay/images (or $ASSAY_IMAGE_CACHE), podman's layer cache makes
rebuilds fast, and build.sh mounts a wheelhouse (~/.cache/assay/wheels) into builds. Failures raise
`ImageBuildError` with one sentence naming the step; missing tools raise `ImagesUnavailable`
(the caller skips outside CI and fails under CI).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO / "deploy" / "images" / "build.sh"
CACHE = Path(os.environ.get("ASSAY_IMAGE_CACHE", Path.home() / ".cache" / "assay" / "images"))
K8S_CACHE = Path(os.environ.get("ASSAY_K8S_CACHE", Path.home() / ".cache" / "assay" / "k8s"))
K8S_VERSION = os.environ.get("ASSAY_K8S_VERSION", "v1.33.13")

SUITE = "bookworm"
BASE_TAG = f"localhost/assay-base:{SUITE}"
ROOTFS_TAG = f"localhost/assay-rootfs:{SUITE}"
PAUSE_VERSION = "3.10"
PAUSE_TAG = f"localhost/pause:{PAUSE_VERSION}"
PAUSE_UID = 65535
TARGETS = ("operator", "runner")
DEFAULT_REPO = "ghcr.io/assay-dev"
"""The tags the Helm chart and runner_images.DEFAULT_IMAGE name, so pods find the local images."""

BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")
_BASE_RECIPE = "1"
"""Bump when the base image's recipe changes, so cached bases are rebuilt."""
_KEY_LABEL = "dev.assay.base.key"


class ImagesUnavailable(Exception):
    """A tool the images need (podman, debootstrap, gcc, go, ctr) is not installed."""


class ImageBuildError(Exception):
    """A step of building or importing an image failed; the message names the step."""


# --- helpers ------------------------------------------------------------------------------


def missing_tools(tools: Iterable[str] = ("podman", "debootstrap")) -> list[str]:
    """The tools among `tools` that are not on PATH."""
    return [tool for tool in tools if shutil.which(tool) is None]


def _require(*tools: str) -> None:
    missing = missing_tools(tools)
    if missing:
        raise ImagesUnavailable(
            f"{', '.join(missing)} not installed: apt-get install {' '.join(_PACKAGE.get(t, t) for t in missing)}"
        )


_PACKAGE = {"ctr": "containerd", "gcc": "gcc libc6-dev", "go": "golang (Go >= 1.24)"}


def _tail(text: str | bytes | None, lines: int = 1) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def _run(cmd: Sequence[str | os.PathLike[str]], step: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run `cmd`; on failure raise ImageBuildError naming `step` and the command's last words."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    try:
        result = subprocess.run([str(c) for c in cmd], **kwargs)  # type: ignore[call-overload]
    except OSError as error:
        raise ImageBuildError(f"{step} failed: {error}.") from None
    if result.returncode != 0:
        raise ImageBuildError(f"{step} failed (exit {result.returncode}): {_tail(result.stderr or result.stdout, 3)}")
    return result


def _podman_image_id(tag: str) -> str | None:
    """podman's image ID (the config digest, hex) of `tag`, or None when it has no such image."""
    result = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None


def _pinned(image: str) -> str:
    """`image` by digest (`name@sha256:...`): build.sh refuses a base given by a tag alone."""
    if "@sha256:" in image:
        return image
    digest = _run(
        ["podman", "image", "inspect", "--format", "{{.Digest}}", image], f"podman image inspect of {image}"
    ).stdout
    name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{name}@{digest.strip()}"


def _podman_label(tag: str, label: str) -> str | None:
    result = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{json .Labels}}", tag], capture_output=True, text=True
    )
    if result.returncode != 0:
        return None
    return (json.loads(result.stdout or "null") or {}).get(label)


def apt_mirror() -> str:
    """The Debian mirror apt is configured with (deb822 .sources or one-line .list files)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, re.M))
                suites = fields.get("Suites", "").split()
                if SUITE in suites and "deb" in fields.get("Types", "").split():
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^\]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return "http://deb.debian.org/debian"


def _host_cas() -> list[Path]:
    cas = [HOST_CA_BUNDLE] if HOST_CA_BUNDLE.is_file() else []
    return cas + sorted(HOST_EXTRA_CAS.glob("*.crt"))


# --- the base image -----------------------------------------------------------------------


def _slim(rootfs: Path) -> None:
    """Drop what an image never reads, as the slim Debian images do (~30 MB): apt's caches and
    lists, documentation (keeping the copyright files), man pages, translations."""
    for leftover in ("var/cache/apt", "var/lib/apt/lists", "usr/share/man", "usr/share/info", "usr/share/locale"):
        for entry in (rootfs / leftover).rglob("*"):
            if entry.is_file() or entry.is_symlink():
                entry.unlink()
    for entry in (rootfs / "usr/share/doc").rglob("*"):
        if (entry.is_file() or entry.is_symlink()) and entry.name != "copyright":
            entry.unlink()


def _rootfs_tarball() -> Path:
    """debootstrap's minbase rootfs as a tarball, cached (debootstrap takes ~54 s, tar ~5 s)."""
    tarball = CACHE / f"rootfs-{SUITE}-minbase-slim-{'-'.join(BASE_PACKAGES)}.tar"
    if tarball.is_file():
        return tarball
    _require("debootstrap")
    CACHE.mkdir(parents=True, exist_ok=True)
    mirror = apt_mirror()
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs.") as tmp:
        rootfs = Path(tmp) / "rootfs"
        start = time.monotonic()
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, rootfs, mirror],
            f"debootstrap of {SUITE} from {mirror}",
        )
        _slim(rootfs)
        partial = tarball.with_suffix(".tar.partial")
        _run(["tar", "-C", rootfs, "--numeric-owner", "-cf", partial, "."], f"tar of the {SUITE} rootfs")
        partial.rename(tarball)
        logger.info("debootstrap %s: %.0f s", SUITE, time.monotonic() - start)
    return tarball


def ensure_base_image(tag: str = BASE_TAG) -> str:
    """A Debian bookworm base with python3, python3-venv and this host's CA bundle; returns its tag.

    The image sets SSL_CERT_FILE, PIP_CERT and REQUESTS_CA_BUNDLE to the bundle. It is
    rebuilt when the host's CAs change (they are created at boot) and reuses the cached
    debootstrap rootfs otherwise.
    """
    _require("podman")
    cas = _host_cas()
    digest = hashlib.sha256(_BASE_RECIPE.encode())
    for ca in cas:
        digest.update(ca.name.encode() + b"\0" + ca.read_bytes())
    tarball = _rootfs_tarball()
    digest.update(f"{tarball.name}:{tarball.stat().st_size}:{tarball.stat().st_mtime_ns}".encode())
    key = digest.hexdigest()[:16]
    if _podman_label(tag, _KEY_LABEL) == key:
        return tag

    if _podman_label(ROOTFS_TAG, _KEY_LABEL + ".rootfs") != tarball.name + str(tarball.stat().st_mtime_ns):
        _run(
            [
                "podman",
                "import",
                "--change",
                f"LABEL {_KEY_LABEL}.rootfs={tarball.name}{tarball.stat().st_mtime_ns}",
                "--change",
                'CMD ["/bin/bash"]',
                tarball,
                ROOTFS_TAG,
            ],
            f"podman import of {tarball.name}",
        )
    with tempfile.TemporaryDirectory(prefix="assay-base.") as tmp:
        context = Path(tmp)
        (context / "cas").mkdir()
        lines = [f"FROM {ROOTFS_TAG}"]
        for ca in cas:
            shutil.copyfile(ca, context / "cas" / ca.name)
            target = HOST_CA_BUNDLE if ca == HOST_CA_BUNDLE else HOST_EXTRA_CAS / ca.name
            lines.append(f"COPY cas/{ca.name} {target}")
        bundle = HOST_CA_BUNDLE
        lines += [
            f"ENV SSL_CERT_FILE={bundle} PIP_CERT={bundle} REQUESTS_CA_BUNDLE={bundle} LANG=C.UTF-8",
            f"LABEL {_KEY_LABEL}={key}",
        ]
        (context / "Containerfile").write_text("\n".join(lines) + "\n")
        _run(["podman", "build", "--pull=never", "-t", tag, context], f"podman build of the base image {tag}")
    return tag


# --- the pause image ----------------------------------------------------------------------


def _kubernetes_module_dir() -> Path:
    """The k8s.io/kubernetes module source in the e2e build's module cache (downloaded if needed)."""
    _require("go")
    env = {**os.environ, "GOMODCACHE": os.environ.get("GOMODCACHE", str(K8S_CACHE / "gomod")), "GOFLAGS": "-mod=mod"}
    result = _run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
        f"go mod download of k8s.io/kubernetes@{K8S_VERSION}",
        env=env,
        cwd=tempfile.gettempdir(),
    )
    return Path(json.loads(result.stdout)["Dir"])


def ensure_pause_image(tag: str = PAUSE_TAG) -> str:
    """The CRI sandbox image: pause.c from Kubernetes, static, in a scratch image (user 65535)."""
    _require("podman")
    if _podman_image_id(tag):
        return tag
    _require("gcc")
    binary = CACHE / f"pause-{PAUSE_VERSION}"
    if not binary.is_file():
        source = _kubernetes_module_dir() / "build" / "pause" / "linux" / "pause.c"
        if not source.is_file():
            raise ImageBuildError(f"the pause source {source} is missing from k8s.io/kubernetes@{K8S_VERSION}.")
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        _run(
            ["gcc", "-Os", "-static", f"-DVERSION=v{PAUSE_VERSION}", "-o", partial, source],
            f"gcc of {source.name} (static; needs libc6-dev)",
        )
        if shutil.which("strip"):
            _run(["strip", partial], "strip of the pause binary")
        partial.rename(binary)
    with tempfile.TemporaryDirectory(prefix="assay-pause.") as tmp:
        context = Path(tmp)
        shutil.copy2(binary, context / "pause")
        (context / "Containerfile").write_text(
            f'FROM scratch\nCOPY pause /pause\nUSER {PAUSE_UID}:{PAUSE_UID}\nENTRYPOINT ["/pause"]\n'
        )
        _run(["podman", "build", "--pull=never", "-t", tag, context], f"podman build of the pause image {tag}")
    return tag


# --- Assay's images -----------------------------------------------------------------------


def build_images(
    base: str,
    *,
    targets: Sequence[str] = TARGETS,
    repo: str = DEFAULT_REPO,
    tag: str | None = None,
    build_args: Sequence[str] = (),
) -> dict[str, str]:
    """Build Assay's images from deploy/images/Dockerfile on `base`; returns target → tag.

    Tags are `<repo>/assay-<target>:<tag or the pyproject version>`; the default repo is the
    one the Helm chart and the operator's default runner images name. Warm rebuilds reuse podman's
    layers and the wheelhouse (~/.cache/assay/wheels). A failed build's full output is kept
    in a log file under the cache, named in the error.
    """
    _require("podman")
    CACHE.mkdir(parents=True, exist_ok=True)
    started = int(time.time())
    log = CACHE / "logs" / f"build-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    log.parent.mkdir(exist_ok=True)
    command = [str(BUILD_SCRIPT), "--builder", "podman", "--repo", repo, "--build-arg", f"BASE={_pinned(base)}"]
    command += [f"--build-arg={arg}" for arg in build_args] + (["--tag", tag] if tag else [])
    for target in targets:
        command += ["--target", target]
    command += ["--", "--pull=never"]
    with log.open("w") as stderr:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO)
    output = log.read_text()
    if result.returncode != 0:
        failure = re.search(r"build\.sh: (.* failed(?: at Dockerfile line \d+)?)", output)
        cause = [line for line in output.splitlines() if line.startswith(("Error:", "error", "ERROR"))]
        what = failure.group(1) if failure else f"deploy/images/build.sh failed (exit {result.returncode})"
        raise ImageBuildError(f"{what}: {_tail(cause[-1] if cause else output)} (full log: {log}).")
    log.unlink()  # kept only when the build failed
    # Each build that changed the code leaves the last one's untagged layers behind (GBs for a
    # runner image); without this the machine's disk fills after a few dozen suites. This
    # build's own layers are newer than `started`, so the next build still finds its cache.
    subprocess.run(
        ["podman", "image", "prune", "--force", "--filter", f"until={started}"], capture_output=True, check=False
    )
    tags = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    missing = [t for t in targets if t not in tags]
    if missing:
        raise ImageBuildError(f"deploy/images/build.sh reported no tag for {', '.join(missing)} (log: {log}).")
    return tags


# --- into containerd ----------------------------------------------------------------------


def _containerd_config_digests(address: str, namespace: str) -> dict[str, str]:
    """ref → image config digest of the images containerd has in `namespace`."""
    ctr = ["ctr", "--address", address, "-n", namespace]
    listing = _run([*ctr, "images", "ls"], f"ctr images ls on {address}").stdout.splitlines()
    out: dict[str, str] = {}
    for line in listing[1:]:
        fields = line.split()
        if len(fields) < 3:
            continue
        ref, digest = fields[0], fields[2]
        manifest = subprocess.run([*ctr, "content", "get", digest], capture_output=True, text=True)
        try:
            document = json.loads(manifest.stdout)
        except json.JSONDecodeError:
            continue
        if "manifests" in document:  # an index: our imports hold one manifest each
            if not document["manifests"]:
                continue
            inner = subprocess.run(
                [*ctr, "content", "get", document["manifests"][0]["digest"]], capture_output=True, text=True
            )
            try:
                document = json.loads(inner.stdout)
            except json.JSONDecodeError:
                continue
        config = (document.get("config") or {}).get("digest")
        if config:
            out[ref] = config
    return out


def import_into_containerd(tags: Iterable[str], *, address: str, namespace: str = "k8s.io") -> dict[str, str]:
    """Put podman's images `tags` into containerd (socket `address`); returns tag → image ID.

    `podman save --format docker-archive` (uncompressed, so no time goes into gzip) is
    piped into `ctr images import -`: no archive touches the disk. An image containerd
    already has under that name with the same config digest (= podman's image ID) is
    skipped, so calling this again is cheap.
    """
    _require("podman", "ctr")
    tags = list(tags)
    present = _containerd_config_digests(address, namespace)
    ids: dict[str, str] = {}
    for tag in tags:
        image_id = _podman_image_id(tag)
        if image_id is None:
            raise ImageBuildError(f"import of {tag} into containerd failed: podman has no image {tag}.")
        ids[tag] = f"sha256:{image_id}"
        if present.get(tag) == ids[tag]:
            logger.info("containerd already has %s (%s)", tag, image_id[:12])
            continue
        if tag in present:
            # An older build under the same name: `ctr images import` does not always move
            # the name to the new digest, so drop the old record first (no pod runs yet).
            subprocess.run(
                ["ctr", "--address", address, "-n", namespace, "images", "rm", tag], capture_output=True, check=False
            )
        start = time.monotonic()
        save = subprocess.Popen(
            ["podman", "save", "--format", "docker-archive", tag], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert save.stdout is not None
        try:
            imported = subprocess.run(
                ["ctr", "--address", address, "-n", namespace, "images", "import", "-"],
                stdin=save.stdout,
                capture_output=True,
                text=True,
            )
        finally:
            save.stdout.close()
            save_err = save.stderr.read().decode(errors="replace") if save.stderr else ""
            save.wait()
        if save.returncode != 0:
            raise ImageBuildError(f"podman save of {tag} failed (exit {save.returncode}): {_tail(save_err, 2)}")
        if imported.returncode != 0:
            raise ImageBuildError(
                f"ctr images import of {tag} into {address} failed (exit {imported.returncode}): "
                f"{_tail(imported.stderr or imported.stdout, 2)}"
            )
        logger.info("imported %s into containerd in %.1f s", tag, time.monotonic() - start)
    after = _containerd_config_digests(address, namespace)
    wrong = [tag for tag in tags if after.get(tag) != ids[tag]]
    if wrong:
        raise ImageBuildError(
            f"ctr images import did not leave {', '.join(wrong)} in containerd namespace {namespace} with podman's image ID."
        )
    return ids


def ensure_all(*, address: str | None = None, namespace: str = "k8s.io") -> dict[str, str]:
    """Base, pause and Assay's images (and, given a containerd socket, imported there): name → tag."""
    base = ensure_base_image()
    tags = {"pause": ensure_pause_image(), **build_images(base)}
    if address:
        import_into_containerd(tags.values(), address=address, namespace=namespace)
    return tags
