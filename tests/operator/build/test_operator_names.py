"""Every valid Evaluation name gives valid child names, checked with Kubernetes' own rules.

The regular expressions and limits are those of k8s.io/apimachinery/pkg/util/validation
(IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label, IsValidLabelValue) and of
apimachinery's path-segment rule for RBAC names, copied here as they are written there.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from assay.operator.build import builders, names
from assay.operator.build import children as run_children
from assay.operator.build.names import label_value
from assay.spec import parse_spec

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and bool(DNS1123_LABEL.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(DNS1123_SUBDOMAIN.match(value))


def is_dns1035_label(value: str) -> bool:
    return len(value) <= 63 and bool(DNS1035_LABEL.match(value))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(LABEL_VALUE.match(value))


def is_path_segment(value: str) -> bool:
    return value not in (".", "..") and "/" not in value and "%" not in value


def _random_subdomain(rng: random.Random, length: int) -> str:
    """A random valid DNS-1123 subdomain of exactly `length` characters: labels joined by dots."""
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    labels = []
    while len(".".join(labels)) < length:
        size = rng.randint(1, 20)
        middle = "".join(rng.choice(alnum + "--") for _ in range(max(size - 2, 0)))
        labels.append((rng.choice(alnum) + middle + rng.choice(alnum))[:size])
    name = ".".join(labels)[:length]
    if name[-1] in ".-":
        name = name[:-1] + "z"
    name = name.replace(".-", ".a").replace("-.", "a.")
    assert is_dns1123_subdomain(name) and len(name) == length, name
    return name


def evaluation_names() -> Iterator[str]:
    yield from [
        "a",
        "x1",
        "pythia-core",
        "llama-3.1-8b.mmlu",
        "llama-3.1-8b",
        "a.b",
        "a-b",
        "0",
        "1b",
        "8b.mmlu",
        "7-eleven",
        "a..b".replace("..", ".0."),
        "a" * 52,
        "a" * 53,
        "a" * 62,
        "a" * 63,
        "a" * 64,
        "a" * 253,
        "9" * 253,
        ".".join(["a" * 63] * 3) + "." + "b" * 61,
        "m." * 126 + "z",
        "abc-" * 62 + "abcde",
        "z" * 44 + "-" + "g" * 7,  # long enough that the job suffix forces truncation
    ]
    rng = random.Random(1234)
    for length in [1, 2, 5, 30, 50, 51, 52, 53, 62, 63, 64, 100, 200, 252, 253] * 4:
        yield _random_subdomain(rng, length)


NAMES = list(dict.fromkeys(evaluation_names()))


def test_the_sample_names_are_valid_evaluation_names() -> None:
    assert all(is_dns1123_subdomain(name) for name in NAMES)
    assert len(NAMES) > 60


def _spec(nodes: int) -> Any:
    return parse_spec(
        {
            "model": "hf",
            "modelArgs": {"pretrained": "m"},
            "tasks": ["arc_easy"],
            "resources": {"nodes": nodes, "gpusPerNode": 2},
        }
    )


def _labels(manifest: dict[str, Any]) -> Iterator[tuple[str, str]]:
    yield from (manifest["metadata"].get("labels") or {}).items()
    if manifest["kind"] == "Job":
        yield from manifest["spec"]["template"]["metadata"]["labels"].items()
    if manifest["kind"] == "Service":
        yield from manifest["spec"]["selector"].items()


@pytest.mark.parametrize("nodes", [1, 4, 1024])
@pytest.mark.parametrize("generation", [1, 12, 9_223_372_036_854_775_807])
def test_every_child_name_and_label_is_valid(nodes: int, generation: int) -> None:
    for name in NAMES:
        ref = builders.EvaluationRef(name=name, namespace="ns", uid="u", generation=generation)
        for child in run_children.children(ref, _spec(nodes)):
            child_name, kind = child["metadata"]["name"], child["kind"]
            if kind == "Service":
                assert is_dns1035_label(child_name), (name, kind, child_name)
            elif kind in ("Role", "RoleBinding"):
                assert is_path_segment(child_name) and is_dns1123_subdomain(child_name), (name, kind, child_name)
            else:
                assert is_dns1123_subdomain(child_name), (name, kind, child_name)
            for key, value in _labels(child):
                assert is_label_value(value), (name, kind, key, value)
            assert child["metadata"]["ownerReferences"][0]["name"] == name
            if kind != "Job":
                continue
            # The Job controller labels pods with the Job's name; Indexed pods get hostname
            # `<job>-<index>` and, with a Service, the subdomain `<service>`.
            assert is_label_value(child_name), (name, child_name)
            pod = child["spec"]["template"]["spec"]
            if nodes > 1:
                assert is_dns1123_label(f"{child_name}-{nodes - 1}"), (name, child_name)
                assert is_dns1035_label(pod["subdomain"])
                endpoint = next(a for a in pod["containers"][0]["command"] if a.startswith("--rdzv_endpoint="))
                host = endpoint.removeprefix("--rdzv_endpoint=").rsplit(":", 1)[0]
                assert is_dns1123_subdomain(host), host
            assert child["metadata"]["annotations"][builders.ANNOTATION_EVALUATION] == name
            assert child["spec"]["template"]["metadata"]["annotations"][builders.ANNOTATION_EVALUATION] == name


def test_names_that_fit_are_kept_whole_before_the_owners_mark() -> None:
    ref = builders.EvaluationRef(name="pythia-core", namespace="ns", uid="u", generation=3)
    mark = names.owner_mark("u")
    assert builders.job_name(ref) == f"pythia-core-g3-{mark}"
    assert builders.labels(ref)[builders.LABEL_EVALUATION] == "pythia-core"
    assert label_value("a" * 63) == "a" * 63


def test_every_child_name_ends_in_a_mark_of_the_evaluations_uid() -> None:
    """No tenant chooses a uid: an Evaluation named `gitlab` cannot be named onto an existing
    `gitlab-g1`, and one made again under its name gets children of other names."""
    marks = {names.owner_mark(f"5d1f6c1e-8a0b-4f55-9d7e-2f1c0f9b7a{i:02}") for i in range(100)}
    assert all(re.fullmatch(r"[0-9a-f]{5}", mark) for mark in marks) and len(marks) == 100
    for uid in ("5d1f6c1e-8a0b-4f55-9d7e-2f1c0f9b7a11", "u", "not a uuid at all"):
        ref = builders.EvaluationRef(name="gitlab", namespace="ns", uid=uid, generation=1)
        mark = names.owner_mark(uid)
        made = {c["kind"]: c["metadata"]["name"] for c in run_children.children(ref, _spec(2))}
        assert sorted(made) == ["Job", "NetworkPolicy", "Service"]
        assert made["Job"] == made["Service"] == made["NetworkPolicy"] == f"gitlab-g1-{mark}"
    again = builders.EvaluationRef(name="gitlab", namespace="ns", uid="another", generation=1)
    assert builders.job_name(again) != builders.job_name(ref)


def test_other_names_get_a_stable_hash_of_the_full_name() -> None:
    dotted = builders.EvaluationRef(name="llama-3.1-8b.mmlu", namespace="ns", uid="u", generation=1)
    job = builders.job_name(dotted)
    assert re.fullmatch(rf"llama-3-1-8b-mmlu-[0-9a-f]{{6}}-g1-{names.owner_mark('u')}", job), job
    assert builders.job_name(dotted) == job  # deterministic: a restarted operator finds its Job
    # Names that sanitise or truncate alike still get different children.
    twin = builders.EvaluationRef(name="llama-3-1-8b-mmlu", namespace="ns", uid="u", generation=1)
    assert builders.job_name(twin) == f"llama-3-1-8b-mmlu-g1-{names.owner_mark('u')}" != job
    digits = builders.EvaluationRef(name="8b.mmlu", namespace="ns", uid="u", generation=1)
    assert builders.job_name(digits).startswith("e-8b-mmlu-")


def test_distinct_names_give_distinct_children() -> None:
    def child(name: str) -> str:
        return builders.job_name(builders.EvaluationRef(name=name, namespace="ns", uid="u", generation=1))

    made = [child(name) for name in NAMES]
    assert len(set(made)) == len(NAMES)
    labels = [label_value(name) for name in NAMES]
    assert len(set(labels)) == len(NAMES)


def test_the_evaluation_is_found_from_its_children_whatever_its_length() -> None:
    name = "x." * 100 + "y"
    ref = builders.EvaluationRef(name=name, namespace="ns", uid="u", generation=1)
    job = builders.job(ref, _spec(2))
    assert job["metadata"]["labels"][builders.LABEL_EVALUATION] != name
    assert builders.evaluation_name(job) == name
    pod = {"metadata": {**job["spec"]["template"]["metadata"], "ownerReferences": [{"kind": "Job", "name": "j"}]}}
    assert builders.evaluation_name(pod) == name
    # Jobs made before the annotation existed: the controller ownerReference; then the label.
    del job["metadata"]["annotations"][builders.ANNOTATION_EVALUATION]
    assert builders.evaluation_name(job) == name
    assert builders.evaluation_name({"metadata": {"labels": {builders.LABEL_EVALUATION: "short"}}}) == "short"
