"""Parsing of `--model_args` / `--metadata` / `--gen_kwargs` strings, as lm-eval parses them.

Accepted forms: `k=v,k2=v2`, JSON objects, or a list of separate `k=v` tokens. Values are
turned into bool (true/false, any case), int (digits only), float, then Python literals;
anything else stays a string — lm-eval 0.4.13's CLI rules.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from typing import Any

from assay.errors import UsageError


def parse_value(text: str) -> Any:
    """lm-eval's CLI rule: true/false, all digits → int, float, Python literal, else str."""
    if text.lower() == "true":
        return True
    if text.lower() == "false":
        return False
    if text.isnumeric():
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


# The example each k=v flag's error shows: its own keys, not another flag's.
_EXAMPLES = {
    "--model_args": "pretrained=gpt2,dtype=float32",
    "-a": "pretrained=gpt2,dtype=float32",
    "--gen_kwargs": "temperature=0,max_gen_toks=256",
    "--metadata": "max_seq_lengths=[4096]",
    "--wandb_args": "project=evals,mode=offline",
    "--wandb_config_args": "team=evals",
    "--hf_hub_log_args": "hub_results_org=me,push_results_to_hub=True",
}


def parse_model_args(
    spec: str | Iterable[str] | dict[str, Any] | None, *, flag: str = "--model_args"
) -> dict[str, Any]:
    """Parse one of the accepted forms into a dict (empty for None or '')."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        return dict(spec)
    tokens = [spec] if isinstance(spec, str) else list(spec)
    result: dict[str, Any] = {}
    for token in tokens:
        token = token.strip()
        if not token:
            continue
        if token.startswith("{"):
            try:
                loaded = json.loads(token)
            except json.JSONDecodeError as err:
                raise UsageError(
                    f"{flag} {token!r} is not valid JSON ({err.msg}); use k=v,k2=v2 or a JSON object."
                ) from None
            if not isinstance(loaded, dict):
                raise UsageError(f"{flag} must be a JSON object or k=v pairs, not {token!r}.")
            result.update(loaded)
            continue
        for pair in _split_pairs(token):
            if "=" not in pair:
                raise UsageError(
                    f"{flag} entry {pair!r} is not of the form key=value; write e.g. {_EXAMPLES.get(flag, _EXAMPLES['--model_args'])}."
                )
            key, value = pair.split("=", 1)
            result[key.strip()] = parse_value(value.strip())
    return result


def _split_pairs(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes, so `a=[1,2]` and `s="x,y"` survive."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    quote: str | None = None
    for char in text:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p for p in (part.strip() for part in parts) if p]
