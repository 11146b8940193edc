"""Parsing where and how the spec's pods run: spec.resources, endpoint, hfTokenSecret,
taskSources, cache, output and podTemplate.

Each parser reads one field through a `Reader` and raises a UserError naming it; `parsing`
reads the whole spec with them.
"""

from __future__ import annotations

from collections.abc import Mapping

from assay.errors import UserError
from assay.spec import kube_names, scheduling
from assay.spec.model import API_MODELS, JSON, Cache, ConfigMapKey, Endpoint, Output, PodTemplate, Resources, SecretKey
from assay.spec.reader import Reader, kind

# The CRD's bounds on what a user writes (deploy/crds/evaluations.assay.dev.yaml), as in `parsing`.
_URL_MAX = 2048
_MODEL_NAME_MAX = 1024
"""endpoint.servedModel and endpoint.tokenizer: a hub id or a path."""
_PATH_MAX = 1024
_TASK_SOURCES_MAX = 16


def parse_resources(r: Reader) -> Resources:
    data = r.mapping("resources")
    if data is None:
        return Resources()
    sub = Reader(data, "spec.resources", {"nodes", "gpusPerNode", "cpu", "memory"})
    return Resources(
        nodes=sub.integer("nodes", 1, minimum=1) or 1,
        gpus_per_node=sub.integer("gpusPerNode", 1, minimum=0) or 0,
        cpu=sub.quantity("cpu"),
        memory=sub.quantity("memory"),
    )


def parse_endpoint(r: Reader, model: str, model_args: Mapping[str, JSON]) -> Endpoint | None:
    data = r.get("endpoint")
    if data is None:
        return None
    if model not in API_MODELS:
        raise UserError(f"spec.endpoint needs spec.model set to one of {', '.join(API_MODELS)}, not {model!r}.")
    clash = sorted({"base_url", "model", "tokenizer", "ca_cert_path"} & set(model_args))
    if clash:
        raise UserError(f"spec.modelArgs.{clash[0]} is set by spec.endpoint; remove it from modelArgs.")
    sub = Reader(data, "spec.endpoint", {"url", "servedModel", "apiKeySecret", "caBundle", "tokenizer"})
    url = sub.string("url", max_length=_URL_MAX, required=True)
    assert url is not None
    if not url.startswith(("http://", "https://")):
        raise UserError(f"spec.endpoint.url must start with http:// or https://, not {url!r}.")
    secret = None
    if sub.get("apiKeySecret") is not None:
        ref = Reader(sub.get("apiKeySecret"), "spec.endpoint.apiKeySecret", {"name", "key"})
        secret = SecretKey(name=ref.object_name("name", required=True) or "", key=ref.data_key("key", "api-key"))
    bundle = None
    if sub.get("caBundle") is not None:
        ref = Reader(sub.get("caBundle"), "spec.endpoint.caBundle", {"configMap", "key"})
        bundle = ConfigMapKey(name=ref.object_name("configMap", required=True) or "", key=ref.data_key("key", "ca.crt"))
    return Endpoint(
        url=url,
        served_model=sub.string("servedModel", max_length=_MODEL_NAME_MAX),
        api_key_secret=secret,
        ca_bundle=bundle,
        tokenizer=sub.string("tokenizer", max_length=_MODEL_NAME_MAX),
    )


def parse_secret(r: Reader) -> SecretKey | None:
    data = r.get("hfTokenSecret")
    if data is None:
        return None
    sub = Reader(data, "spec.hfTokenSecret", {"name", "key"})
    name = sub.object_name("name", required=True)
    assert name is not None
    return SecretKey(name=name, key=sub.data_key("key", "token"))


def parse_task_sources(r: Reader) -> tuple[str, ...]:
    data = r.get("taskSources")
    if data is None:
        return ()
    if not isinstance(data, list):
        raise UserError(f"spec.taskSources must be a list of {{configMap: NAME}}, not {kind(data)}.")
    if len(data) > _TASK_SOURCES_MAX:
        raise UserError(
            f"spec.taskSources lists {len(data)} ConfigMaps; keep at most {_TASK_SOURCES_MAX} "
            "(one ConfigMap holds many task YAMLs)."
        )
    names: list[str] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise UserError(f"spec.taskSources[{i}] must be a mapping {{configMap: NAME}}, not {kind(item)}.")
        name = Reader(item, f"spec.taskSources[{i}]", {"configMap"}).object_name("configMap", required=True)
        assert name is not None
        if name in names:
            raise UserError(f"spec.taskSources names ConfigMap {name!r} twice; list it once.")
        names.append(name)
    return tuple(names)


def parse_cache(r: Reader) -> Cache:
    data = r.mapping("cache")
    if data is None:
        return Cache()
    sub = Reader(data, "spec.cache", {"pvc", "offline", "datasetsDir", "localDatasetsDir"})
    return Cache(
        pvc=sub.object_name("pvc"),
        offline=bool(sub.boolean("offline", False)),
        datasets_dir=_relative_path(sub, "datasetsDir"),
        local_datasets_dir=_relative_path(sub, "localDatasetsDir"),
    )


def parse_output(r: Reader) -> Output:
    data = r.mapping("output")
    if data is None:
        return Output()
    sub = Reader(data, "spec.output", {"pvc", "path"})
    return Output(pvc=sub.object_name("pvc"), path=_relative_path(sub, "path"))


def _relative_path(r: Reader, key: str) -> str | None:
    value = r.string(key, max_length=_PATH_MAX)
    if value is not None and (value.startswith("/") or ".." in value.split("/")):
        raise UserError(f"{r.where(key)} must be a relative path inside the volume without '..', not {value!r}.")
    return value


def parse_pod_template(r: Reader) -> PodTemplate:
    data = r.mapping("podTemplate")
    if data is None:
        return PodTemplate()
    sub = Reader(
        data,
        "spec.podTemplate",
        {"nodeSelector", "tolerations", "affinity", "priorityClassName", "labels", "annotations"},
    )
    affinity = sub.get("affinity")
    return PodTemplate(
        node_selector=kube_names.check_labels(sub.mapping("nodeSelector") or {}, "spec.podTemplate.nodeSelector"),
        tolerations=scheduling.tolerations(sub.get("tolerations"), "spec.podTemplate.tolerations"),
        affinity=None if affinity is None else scheduling.affinity(affinity, "spec.podTemplate.affinity"),
        priority_class_name=sub.object_name("priorityClassName"),
        labels=kube_names.check_labels(sub.mapping("labels") or {}, "spec.podTemplate.labels"),
        annotations=kube_names.check_labels(
            sub.mapping("annotations") or {}, "spec.podTemplate.annotations", annotations=True
        ),
    )
