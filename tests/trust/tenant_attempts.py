"""The tenant-attempt corpus: what a tenant (whoever may create Evaluations and ConfigMaps in a
namespace) tried in order to get more than an evaluation, each as it was made.

An attempt is an Evaluation spec, the ConfigMaps of task YAML it names, and where it must be
refused: `operator` (the operator's admission, before any child exists), `runner` (the runner
pod's own entry point, which takes a ConfigMap's tasks as a tenant's), `run` (`assay run` on a
user's own machine, where lm-eval's trust model holds: only what no user asks for is refused
there). `test_tenant_corpus.py` runs every attempt through every surface it names.

Held elsewhere, since they need objects in a cluster rather than a spec: a child name taken by
another object (tests/operator/runtime/test_operator_owned.py, e2e test_owned_children.py), a
rendezvous reachable from another run's pods (the per-run NetworkPolicy: test_operator_builders,
e2e test_multi_node and test_owned_children), a flood of made-up /metrics tokens
(test_operator_metrics_tls.py), a Secret without consent (test_operator_secret_consent.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

SECRET = "OPENAI_API_KEY=sk-test-corpus-0123456789"
"""In the documents, a file beside the datasets and the environment: no message may carry it."""
RUNNER_IMAGES = ("ghcr.io/assay-dev/assay-runner", "ghcr.io/assay-dev/assay-runner-vllm")
"""The chart's default allowedImagePrefixes (tests/operator/deploy/test_operator_chart_images.py renders it)."""

OPERATOR, RUNNER, RUN = "operator", "runner", "run"

# A generation task over the corpus's own documents (in the datasets directory, `corpus/test.jsonl`).
_DATA = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: corpus/test.jsonl\n"
_GEN = (
    "output_type: generate_until\ntest_split: test\ndoc_to_target: '{{answer}}'\n"
    "generation_kwargs:\n  until: ['\\n']\n  max_gen_toks: 4\n"
)
_EXACT = "metric_list:\n  - metric: exact_match\n"


def _task(name: str, *, text: str = "'{{question}}'", data: str = _DATA, metrics: str = _EXACT, extra: str = "") -> str:
    return f"task: {name}\n{data}{_GEN}doc_to_text: {text}\n{metrics}{extra}"


@dataclasses.dataclass(frozen=True)
class Attempt:
    id: str
    aim: str
    """What it tried to get, in words."""
    refused_by: tuple[str, ...]
    tasks: tuple[str, ...] = ("mine",)
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    """The task ConfigMap's keys (one ConfigMap, `suite`); none: the spec names library tasks."""
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Spec fields beyond model, tasks and taskSources."""
    said: str = ""
    """Words each refusal must contain (the one sentence names the input)."""
    model_args: str = ""
    """`assay run --model_args` for the `run` surface, where the attempt is in the model args."""


def _nested(levels: int) -> str:
    return "task: mine\nmetadata: " + "[" * levels + "]" * levels + "\n"


_ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)
_ALIAS_BOMB = f"task: mine\nmetadata:\n  bomb:\n{''.join('    ' + line + chr(10) for line in _ALIAS_BOMB.splitlines())}"

ATTEMPTS: tuple[Attempt, ...] = (
    # Tenant text parsed within bounds.
    Attempt(
        "yaml-nested-30000",
        "crash the operator (libyaml's C stack)",
        (OPERATOR, RUNNER, RUN),
        files={"mine.yaml": _nested(30000)},
        said="deeper than 64 levels",
    ),
    Attempt(
        "yaml-nested-20000",
        "a RecursionError retried for ever",
        (OPERATOR, RUNNER, RUN),
        files={"mine.yaml": _nested(20000)},
        said="deeper than 64 levels",
    ),
    Attempt(
        "yaml-alias-bomb",
        "minutes of operator CPU from 600 bytes",
        (OPERATOR, RUNNER, RUN),
        files={"mine.yaml": _ALIAS_BOMB},
        said="alias",
    ),
    # One name space.
    Attempt(
        "name-library-task",
        "report crafted rows as arc_easy",
        (OPERATOR, RUNNER),
        tasks=("arc_easy",),
        files={"arc.yaml": _task("arc_easy")},
        said="arc_easy",
    ),
    Attempt(
        "name-library-group",
        "take the name of the mmlu group",
        (OPERATOR, RUNNER),
        tasks=("mmlu",),
        files={"g.yaml": "group: mmlu\ntask: [mine]\n", "mine.yaml": _task("mine")},
        said="mmlu",
    ),
    Attempt(
        "group-changes-library-task",
        "arc_easy's name over the tenant's data",
        (OPERATOR, RUNNER),
        tasks=("suite",),
        files={"g.yaml": "group: suite\ntask:\n  - task: arc_easy\n    dataset_path: json\n"},
        said="arc_easy",
    ),
    # Task files are data.
    Attempt(
        "function-tag",
        "run Python from a ConfigMap",
        (OPERATOR, RUNNER),
        files={
            "mine.yaml": _task("mine", extra="process_results: !function utils.process\n"),
            "utils.py": "import os\ndef process(doc, results):\n    return {'x': os.getpid()}\n",
        },
        said="!function",
    ),
    Attempt(
        "include-absolute",
        "read a file of the pod as a task",
        (OPERATOR, RUNNER, RUN),
        files={"mine.yaml": "include: /etc/hostname\ntask: mine\n"},
        said="include",
    ),
    Attempt(
        "include-outside",
        "read a file above the task folder",
        (OPERATOR, RUNNER, RUN),
        files={"mine.yaml": "include: ../../../../../../etc/hostname\ntask: mine\n"},
        said="include",
    ),
    Attempt(
        "data-proc-environ",
        "the pod's environment as documents",
        (RUNNER,),
        files={
            "mine.yaml": _task(
                "mine", data="dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: /proc/self/environ\n"
            )
        },
        said="/proc/self/environ",
    ),
    Attempt(
        "data-dotdot",
        "a file beside the datasets directory",
        (RUNNER,),
        files={
            "mine.yaml": _task(
                "mine", data="dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: ../secret.env\n"
            )
        },
        said="leads out of its folder",
    ),
    Attempt(
        "data-service-account-token",
        "the runner's own token",
        (RUNNER,),
        files={
            "mine.yaml": _task(
                "mine",
                data="dataset_path: text\ndataset_kwargs:\n  data_files:\n    test: "
                "/var/run/secrets/kubernetes.io/serviceaccount/token\n",
            )
        },
        said="absolute path",
    ),
    Attempt(
        "data-cache-dir",
        "write into the admin's datasets cache",
        (RUNNER,),
        files={"mine.yaml": _task("mine", data=_DATA + "  cache_dir: /tmp/elsewhere\n")},
        said="cache_dir",
    ),
    Attempt(
        "data-url",
        "fetch from a cloud metadata address",
        (RUNNER,),
        files={
            "mine.yaml": _task(
                "mine",
                data="dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: http://169.254.169.254/latest\n",
            )
        },
        said="is a URL",
    ),
    # Templates render sandboxed and within bounds; a tenant's template error says nothing of the document.
    Attempt(
        "template-escape",
        "Python's internals from a template",
        (RUNNER, RUN),
        files={"mine.yaml": _task("mine", text="\"{{ ''.__class__.__mro__[1].__subclasses__() }}\"")},
        said="doc_to_text",
    ),
    Attempt(
        "template-cpu-bomb",
        "hold a runner's CPU for ever",
        (RUNNER, RUN),
        files={
            "mine.yaml": _task(
                "mine", text="'{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}'"
            )
        },
        said="doc_to_text",
    ),
    Attempt(
        "template-output-bomb",
        "fill the runner's memory",
        (RUNNER, RUN),
        files={"mine.yaml": _task("mine", text="\"{{ 'x' * 10**10 }}\"")},
        said="doc_to_text",
    ),
    Attempt(
        "template-error-echo",
        "a document (a secret) echoed in status",
        (RUNNER,),
        files={"mine.yaml": _task("mine", text="'{{ {}[text] }}'")},
        said="failed to render on a document",
    ),
    # Regexes of task files within a time bound.
    Attempt(
        "regex-backtracking",
        "catastrophic backtracking in a metric's regex",
        (RUNNER, RUN),
        files={
            "mine.yaml": _task(
                "mine", metrics="metric_list:\n  - metric: exact_match\n    regexes_to_ignore: ['(a+)+$']\n"
            )
        },
        said="(a+)+$",
    ),
    # One strict boolean.
    *(
        Attempt(
            f"trust-remote-code-{word}",
            "the model repository's code, with the policy's no",
            (OPERATOR, RUN),
            files={"mine.yaml": _task("mine")},
            spec={"modelArgs": {"pretrained": "x", "trust_remote_code": word}},
            said="must be true or false",
            model_args=f"pretrained=x,trust_remote_code={word}",
        )
        for word in ("on", "enabled", "y")
    ),
    # The admin's policy: images, placement, endpoints.
    Attempt(
        "image-foreign",
        "any image: pod create in the namespace",
        (OPERATOR,),
        tasks=("arc_easy",),
        spec={"image": "docker.io/attacker/shell:latest"},
        said="spec.image",
    ),
    *(
        Attempt(
            f"annotation-{key.split('/')[0]}",
            "out of the node's confinement or onto another network",
            (OPERATOR,),
            tasks=("arc_easy",),
            spec={"podTemplate": {"annotations": {key: value}}},
            said=key,
        )
        for key, value in (
            ("container.apparmor.security.beta.kubernetes.io/runner", "unconfined"),
            ("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
            ("k8s.v1.cni.cncf.io/networks", "host-net"),
            # the runner reads its spec from this annotation: a tenant's value would replace it
            ("assay.dev/spec", '{"model": "hf", "trustRemoteCode": true}'),
        )
    ),
    Attempt(
        "priority-class",
        "preempt other tenants' pods",
        (OPERATOR,),
        tasks=("arc_easy",),
        spec={"podTemplate": {"priorityClassName": "system-node-critical"}},
        said="priorityClassName",
    ),
    Attempt(
        "toleration-control-plane",
        "run on the control plane's nodes",
        (OPERATOR,),
        tasks=("arc_easy",),
        spec={
            "podTemplate": {
                "tolerations": [
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
                ]
            }
        },
        said="toleration",
    ),
    Attempt(
        "endpoint-credentials",
        "a password in an endpoint URL, into logs and status",
        (OPERATOR, RUN),
        files={"mine.yaml": _task("mine")},
        spec={
            "model": "local-completions",
            "modelArgs": {"base_url": "http://user:pass@127.0.0.1:9/v1/completions", "model": "m"},
        },
        said="user name or password",
        model_args="base_url=http://user:pass@127.0.0.1:9/v1/completions,model=m",
    ),
)
