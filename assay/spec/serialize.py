"""Writing an Evaluation back in the custom resource's camelCase form.

`parse_spec(spec_to_dict(e)) == e`; unset optional fields are left out, as the API server
would store them.
"""

from __future__ import annotations

from assay.run_options import DEFAULT_BOOTSTRAP_ITERS, SentinelSettings
from assay.spec import gate
from assay.spec.model import JSON, Evaluation


def spec_to_dict(e: Evaluation) -> dict[str, JSON]:
    out: dict[str, JSON] = {
        "model": e.model,
        "modelArgs": dict(e.model_args),
        "tasks": list(e.tasks),
        "numFewshot": e.num_fewshot,
        "limit": e.limit,
        "samples": {t: list(ids) for t, ids in e.samples.items()} if e.samples is not None else None,
        "batchSize": e.batch_size.given,
        "maxBatchSize": e.max_batch_size,
        "genKwargs": dict(e.gen_kwargs) if e.gen_kwargs is not None else None,
        "seed": _seed(e),
        "bootstrapIters": e.bootstrap_iters if e.bootstrap_iters != DEFAULT_BOOTSTRAP_ITERS else None,
        "applyChatTemplate": e.apply_chat_template,
        "chatTemplate": e.chat_template,
        "fewshotAsMultiturn": e.fewshot_as_multiturn,
        "systemInstruction": e.system_instruction,
        "logSamples": e.log_samples,
        "predictOnly": e.predict_only,
        "metadata": dict(e.metadata) if e.metadata is not None else None,
        "trustRemoteCode": e.trust_remote_code,
        "allowUnsafeCode": e.allow_unsafe_code,
        "resources": _resources(e),
        "image": e.image,
        "hfTokenSecret": {"name": e.hf_token_secret.name, "key": e.hf_token_secret.key} if e.hf_token_secret else None,
        "endpoint": _endpoint(e),
        "cache": _cache(e),
        "output": _drop_none({"pvc": e.output.pvc, "path": e.output.path}),
        "podTemplate": _pod_template(e),
        "backoffLimit": e.backoff_limit,
        "activeDeadlineSeconds": e.active_deadline_seconds,
        "suspend": e.suspend,
        "taskSources": [{"configMap": name} for name in e.task_sources] or None,
        "baseline": gate.baseline_to_dict(e.baseline) if e.baseline is not None else None,
        "gate": gate.gate_to_dict(e.gate) if e.baseline is not None else None,
        "stopAt": gate.stop_at_to_dict(e.stop_at) if e.stop_at is not None else None,
        "sentinels": _sentinels(e),
    }
    return _drop_none(out)


def _sentinels(e: Evaluation) -> JSON:
    """The settings that differ from the defaults, in spec.sentinels' names; None when none do."""
    from assay.spec.options_parsing import SENTINEL_FIELDS

    given, defaults = e.sentinels.as_dict(), SentinelSettings().as_dict()
    changed = {key: given[name] for key, name in SENTINEL_FIELDS.items() if given[name] != defaults[name]}
    return changed or None


def _seed(e: Evaluation) -> JSON:
    """One integer when the four seeds agree, else "random,numpy,torch,fewshot" as spec.seed takes it."""
    seed = e.seed
    if seed.random == seed.numpy == seed.torch == seed.fewshot and seed.random is not None:
        return seed.random
    return ",".join("None" if s is None else str(s) for s in (seed.random, seed.numpy, seed.torch, seed.fewshot))


def _resources(e: Evaluation) -> JSON:
    return _drop_none(
        {
            "nodes": e.resources.nodes,
            "gpusPerNode": e.resources.gpus_per_node,
            "cpu": e.resources.cpu,
            "memory": e.resources.memory,
        }
    )


def _cache(e: Evaluation) -> JSON:
    return _drop_none(
        {
            "pvc": e.cache.pvc,
            "offline": e.cache.offline,
            "datasetsDir": e.cache.datasets_dir,
            "localDatasetsDir": e.cache.local_datasets_dir,
        }
    )


def _pod_template(e: Evaluation) -> JSON:
    return _drop_empty(
        {
            "nodeSelector": dict(e.pod_template.node_selector),
            "tolerations": [dict(t) for t in e.pod_template.tolerations],
            "affinity": e.pod_template.affinity,
            "priorityClassName": e.pod_template.priority_class_name,
            "labels": dict(e.pod_template.labels),
            "annotations": dict(e.pod_template.annotations),
        }
    )


def _endpoint(e: Evaluation) -> JSON:
    point = e.endpoint
    if point is None:
        return None
    secret = point.api_key_secret
    bundle = point.ca_bundle
    return _drop_none(
        {
            "url": point.url,
            "servedModel": point.served_model,
            "tokenizer": point.tokenizer,
            "apiKeySecret": {"name": secret.name, "key": secret.key} if secret else None,
            "caBundle": {"configMap": bundle.name, "key": bundle.key} if bundle else None,
        }
    )


def _drop_none(data: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in data.items() if v is not None}


def _drop_empty(data: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in data.items() if v not in (None, {}, [])}
