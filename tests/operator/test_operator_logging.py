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
        body = kopf.Body(
            {
                "apiVersion": "assay.dev/v1alpha1",
                "kind": "Evaluation",
                "metadata": {"name": "llama.mmlu", "namespace": "team", "uid": "u"},
            }
        )
        from kopf._core.actions.loggers import LocalObjectLogger

        LocalObjectLogger(body=body, settings=kopf.OperatorSettings()).info("Handler %r succeeded.", "reconcile")
        logging.getLogger("kopf.objects").info("not about one object")
        # kopf's debug dump of the whole object (as kopf writes it: formatted into the message).
        secret = "hf_" + "Zq7" * 12
        LocalObjectLogger(body=body, settings=kopf.OperatorSettings()).info(
            f"Creation is in progress: {{'spec': {{'modelArgs': {{'token': '{secret}'}}}}}}"
        )
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
