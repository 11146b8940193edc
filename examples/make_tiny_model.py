"""Write a tiny, randomly initialised GPT-2 for smoke runs, with nothing downloaded.

    python examples/make_tiny_model.py [OUT_DIR] [--tokenizer DIR_OR_HUB_ID]

By default its tokenizer is byte-level, built here with the `tokenizers` library: one token
per byte (token id = the byte's value, as in GPT-2's byte alphabet) and `<|endoftext|>`, no
merges, so it needs no vocabulary file and encodes any text. `--tokenizer` takes a real one
instead (a folder such as a GPT-2 tokenizer's, or a hub id such as `gpt2` with internet).
The model's scores are meaningless; it exercises the whole pipeline in seconds on a CPU.
"""

from __future__ import annotations

import argparse
from typing import Any

END_OF_TEXT = "<|endoftext|>"


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte 0..255, in byte order (its bytes_to_unicode):
    printable Latin-1 bytes stand for themselves, the rest are shifted past 255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters: dict[int, str] = {}
    shifted = 0
    for byte in range(256):
        if byte in printable:
            characters[byte] = chr(byte)
        else:
            characters[byte] = chr(256 + shifted)
            shifted += 1
    return [characters[byte] for byte in range(256)]


def byte_level_tokenizer() -> Any:
    """A transformers fast tokenizer with one token per byte and `<|endoftext|>` (id 256)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {character: byte for byte, character in enumerate(byte_alphabet())}
    vocab[END_OF_TEXT] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([END_OF_TEXT])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT, unk_token=END_OF_TEXT
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="tiny-gpt2")
    parser.add_argument("--tokenizer", help="a tokenizer folder or hub id (default: a byte-level one built here)")
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer) if args.tokenizer else byte_level_tokenizer()
    torch.manual_seed(1234)
    # 1,024 positions: a byte-level LAMBADA passage is a few hundred tokens.
    end = tokenizer.eos_token_id
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=1024, n_embd=64, n_layer=2, n_head=2, bos_token_id=end, eos_token_id=end
    )
    GPT2LMHeadModel(config).save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
