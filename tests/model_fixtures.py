"""Tiny, deterministic HF models saved to disk, for backend and end-to-end tests.

Every builder writes a complete model directory (config, weights, tokenizer) with
`save_pretrained`, so that Assay and lm-eval load exactly the same files. The tokenizers are
built offline from the real GPT-2 BPE files in the shared data folder:

- `tiny_gpt2`: the GPT-2 tokenizer as is (no BOS added, unk = eos = <|endoftext|>).
- `tiny_llama`: a Llama model whose tokenizer ADDS a BOS token `<s>` and has no pad/unk
  token (so the pad token falls back to EOS), with a small chat template.
- `tiny_t5`: an encoder-decoder whose tokenizer appends `</s>` like T5's does.

Weights come from `torch.manual_seed(seed)`; context sizes are small (64 positions) so that
tests can exercise left truncation cheaply.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

N_POSITIONS = 64


def _gpt2_backend(tokenizer_dir: Path):
    """A fresh `tokenizers.Tokenizer` with the GPT-2 vocabulary and merges."""
    import tokenizers
    import transformers

    base = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert len(base) == 50257, "the GPT-2 tokenizer loaded with a wrong vocabulary size"
    return tokenizers.Tokenizer.from_str(base.backend_tokenizer.to_str())


def tiny_gpt2(
    directory: Path | str, tokenizer_dir: Path | str, *, seed: int = 1234, positions: int = N_POSITIONS
) -> Path:
    """GPT-2 (2 layers, 64 wide, 64 positions unless told) with the real GPT-2 tokenizer."""
    import torch
    import transformers

    directory = Path(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=positions,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def tiny_llama(
    directory: Path | str, tokenizer_dir: Path | str, *, seed: int = 1234, positions: int = N_POSITIONS
) -> Path:
    """Llama (2 layers, 64 wide) whose tokenizer prepends `<s>` and carries a chat template."""
    import tokenizers
    import torch
    import transformers

    directory = Path(directory)
    backend = _gpt2_backend(Path(tokenizer_dir))
    backend.add_special_tokens([tokenizers.AddedToken("<s>", special=True)])
    bos_id = backend.token_to_id("<s>")
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="<|endoftext|>",
        model_max_length=positions,
        chat_template=CHAT_TEMPLATE,
    )
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        bos_token_id=bos_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def tiny_t5(directory: Path | str, tokenizer_dir: Path | str, *, seed: int = 1234) -> Path:
    """T5 (2+2 layers, 64 wide) whose tokenizer appends `</s>` and pads with `<pad>`."""
    import tokenizers
    import torch
    import transformers

    directory = Path(directory)
    backend = _gpt2_backend(Path(tokenizer_dir))
    backend.add_special_tokens(
        [tokenizers.AddedToken("</s>", special=True), tokenizers.AddedToken("<pad>", special=True)]
    )
    eos_id, pad_id = backend.token_to_id("</s>"), backend.token_to_id("<pad>")
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos_id)]
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=N_POSITIONS,
    )
    config = transformers.T5Config(
        vocab_size=len(tokenizer),
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        decoder_start_token_id=pad_id,
    )
    torch.manual_seed(seed)
    model = transformers.T5ForConditionalGeneration(config).eval()
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


# -- session-scoped pytest fixtures (import them into a test module to use them) -----------


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    return tiny_gpt2(tmp_path_factory.mktemp("tiny_gpt2"), shared_data / "gpt2_tokenizer")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("tiny_llama"), shared_data / "gpt2_tokenizer")


@pytest.fixture(scope="session")
def t5_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    return tiny_t5(tmp_path_factory.mktemp("tiny_t5"), shared_data / "gpt2_tokenizer")


@pytest.fixture(scope="session")
def long_models(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> dict[str, Path]:
    """The tiny GPT-2 and Llama with 1,024 positions: few-shot prompts fit untruncated."""
    tokenizer = shared_data / "gpt2_tokenizer"
    return {
        "gpt2": tiny_gpt2(tmp_path_factory.mktemp("gpt2_long"), tokenizer, positions=1024),
        "llama": tiny_llama(tmp_path_factory.mktemp("llama_long"), tokenizer, positions=1024),
    }
