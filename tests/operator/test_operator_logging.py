"""The operator's log lines: each line kopf logs about an Evaluation names it."""

from __future__ import annotations


def test_kopfs_per_object_log_lines_name_their_evaluation() -> None:
    """A real kopf ObjectLogger through the operator's root formatter (item 10's log lines)."""
    import io
    import logging

    import kopf

    from assay.operator.main import LOG_FORMAT, EvaluationPrefixFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EvaluationPrefixFormatter(LOG_FORMAT))
    kopf_logger = logging.getLogger("kopf.objects")
    kopf_logger.addHandler(handler)
    old_level, kopf_logger.level = kopf_logger.level, logging.INFO
    try:
        body = kopf.Body({"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation",
                          "metadata": {"name": "llama.mmlu", "namespace": "team", "uid": "u"}})  # fmt: skip
        from kopf._core.actions.loggers import LocalObjectLogger

        LocalObjectLogger(body=body, settings=kopf.OperatorSettings()).info("Handler %r succeeded.", "reconcile")
        logging.getLogger("kopf.objects").info("not about one object")
        # kopf's debug dump of the whole object (as kopf writes it: formatted into the message).
        secret = "hf_" + "Zq7" * 12
        LocalObjectLogger(body=body, settings=kopf.OperatorSettings()).info(
            f"Creation is in progress: {{'spec': {{'modelArgs': {{'token': '{secret}'}}}}}}")
        logging.getLogger("kopf.objects").info("a token %s in any line", secret)
    finally:
        kopf_logger.removeHandler(handler)
        kopf_logger.level = old_level
    first, second, dump, anywhere = stream.getvalue().splitlines()
    assert first.endswith("kopf.objects: [team/llama.mmlu] Handler 'reconcile' succeeded.")
    assert second.endswith("kopf.objects: not about one object")
    assert dump.endswith("[team/llama.mmlu] Creation is in progress (the object is not logged: it may hold secrets).")
    assert anywhere.endswith("a token hf_<redacted> in any line")
    assert secret not in stream.getvalue()


def test_the_api_client_pool_is_sized_for_the_handler_threads(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Sized from the work (kopf's handler threads), not from the node's CPU count (issue 15 item 10)."""
    import yaml
    from kubernetes import client

    from assay.operator import handlers, kube

    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
              "users": [{"name": "u", "user": {"token": "t"}}],
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}  # fmt: skip
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    before = client.Configuration.get_default_copy()
    try:
        kube.load_config()
        assert client.Configuration.get_default_copy().connection_pool_maxsize == kube.API_POOL_SIZE
        assert kube.API_POOL_SIZE >= handlers.HANDLER_WORKERS
    finally:
        client.Configuration.set_default(before)
