"""examples/make_tiny_model.py's byte-level tokenizer: built with nothing downloaded and no file
from outside the repository, one token per byte (token id = the byte), any text round-trips."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "examples" / "make_tiny_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_byte_alphabet_is_gpt2s() -> None:
    alphabet = _script().byte_alphabet()
    assert len(alphabet) == len(set(alphabet)) == 256
    assert alphabet[ord("A")] == "A" and alphabet[ord(" ")] == "Ġ" and alphabet[ord("\n")] == "Ċ"  # as in GPT-2's vocab


@pytest.mark.parametrize("text", ["Hello world", "Größe: 5 µm — ok?\n", "日本語", " leading space", ""])
def test_one_token_per_byte_and_every_text_round_trips(text: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    built = _script().byte_level_tokenizer()
    built.save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)  # as the hf backend loads it
    assert len(tokenizer) == 257 and tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 256
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert tokenizer.decode(ids) == text
