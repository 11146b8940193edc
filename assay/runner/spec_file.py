"""Where the runner reads its Evaluation spec: `--spec FILE`, or the file the operator mounts.

The operator puts the spec in the runner pod's annotation `assay.dev/spec`, which a downward
API volume writes as the file ASSAY_EVALUATION_FILE names (not an environment variable
holding the spec: Linux refuses one past 128 KiB); the runner reads it with no API request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay import spec as spec_module
from assay.errors import UserError


def load_spec(path: str | None = None, env: Mapping[str, str] | None = None) -> spec_module.Evaluation:
    """The spec from `--spec FILE` if given, else from the file ASSAY_EVALUATION_FILE names; UserError if neither parses."""
    env = os.environ if env is None else env
    if path:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise UserError(
                f"Cannot read --spec {path} ({error.strerror}); pass an existing JSON or YAML file."
            ) from None
        except yaml.YAMLError as error:
            raise UserError(
                f"--spec {path} is not valid JSON or YAML ({str(error).splitlines()[0]}); fix the file."
            ) from None
    elif env.get(spec_module.ENV_SPEC_FILE):
        data = _read_spec_file(env[spec_module.ENV_SPEC_FILE])
    else:
        raise UserError(
            f"No Evaluation spec: set {spec_module.ENV_SPEC_FILE} to a JSON file of the spec or pass --spec FILE."
        )
    if isinstance(data, Mapping) and "apiVersion" in data:
        return spec_module.parse_manifest(data)[1]
    if not isinstance(data, Mapping):
        raise UserError("The Evaluation spec must be a mapping of spec fields (model, tasks, ...).")
    return spec_module.parse_spec(data)


def _read_spec_file(path: str) -> Any:
    """The spec file the operator mounts: JSON, read as JSON (a long `samples` list makes it large; YAML's parser is slow)."""
    named = f"{spec_module.ENV_SPEC_FILE}={path}"
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(
            f"Cannot read the Evaluation spec {named} ({error.strerror}); mount the run's spec "
            "there, or pass --spec FILE."
        ) from None
    except ValueError as error:  # not JSON, or not UTF-8
        raise UserError(
            f"The Evaluation spec {named} is not valid JSON ({str(error).splitlines()[0]}); "
            "write the spec there as JSON."
        ) from None
