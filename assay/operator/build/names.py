"""Names of an Evaluation's children: valid Kubernetes names for any valid Evaluation name.

An Evaluation's name may be up to 253 characters with dots (`llama-3.1-8b.mmlu`); its
Jobs, Services and pods need DNS-1035 labels, and label values at most 63 characters. A
name that already fits is kept as it is; any other is shortened with a stable hash suffix.

Every child's name ends in its owner's mark (`owner_mark`: 5 hex of a hash of the
Evaluation's uid), which no tenant chooses: an Evaluation named `gitlab` makes
`gitlab-g1-<mark>`, never `gitlab-g1`, so it cannot be named to land on an object
someone else made. The operator still changes only what carries its controller reference
(`runtime.owned`): the mark keeps names apart, the reference is the proof.
"""

from __future__ import annotations

import hashlib
import re

# Indexed pods are named `<job>-<index>-<random>` and get hostname `<job>-<index>`, which
# must fit a DNS label (63); leave room for the index (nodes <= 1024: "-1023").
_MAX_BASE_NAME = 52
MAX_LABEL_VALUE = 63
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DIGEST_CHARS = 6
_OWNER_MARK_CHARS = 5


def digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:_DIGEST_CHARS]


def owner_mark(uid: str) -> str:
    """5 hex of the hash of an Evaluation's uid, ending each of its children's names.

    A hash, not the uid's first characters: any uid string gives a DNS-label-safe mark. One
    Evaluation deleted and made again under its name (GitOps replace) gets a new uid, so
    its children never meet the old ones that the garbage collector is still removing."""
    return hashlib.sha256(uid.encode()).hexdigest()[:_OWNER_MARK_CHARS]


def child_name(name: str, suffix: str) -> str:
    """`<name>-<suffix>` as a DNS-1035 label of at most 52 characters.

    Names that are DNS-1035 labels and short enough are kept whole, readable in `kubectl
    get`; all others get the hash of the full name."""
    candidate = f"{name}-{suffix}"
    if DNS1035_LABEL.fullmatch(name) and len(candidate) <= _MAX_BASE_NAME:
        return candidate
    stem = re.sub(r"[^a-z0-9-]", "-", name.lower())
    if not stem[0].isalpha():
        stem = f"e-{stem}"
    keep = _MAX_BASE_NAME - len(suffix) - _DIGEST_CHARS - 2
    return f"{stem[:keep].rstrip('-')}-{digest(name)}-{suffix}"


def label_value(name: str) -> str:
    """A name as a label value: itself up to 63 characters, else a prefix and its hash."""
    if len(name) <= MAX_LABEL_VALUE:
        return name
    keep = MAX_LABEL_VALUE - _DIGEST_CHARS - 1
    return f"{name[:keep].rstrip('-._')}-{digest(name)}"
