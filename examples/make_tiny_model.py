"""Write a tiny, randomly initialised GPT-2 (with the real GPT-2 tokenizer) for smoke runs.

    python examples/make_tiny_model.py [OUT_DIR] [--tokenizer DIR]

The tokenizer comes from ASSAY_SHARED_DATA/gpt2_tokenizer (default ../shared/data beside
the checkout), so nothing is downloaded. Its scores are meaningless; it exercises the
whole pipeline in seconds on a CPU.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main() -> int:
    repo = Path(__file__).resolve().parents[1]
    default_tokenizer = Path(os.environ.get("ASSAY_SHARED_DATA", repo.parent / "shared" / "data")) / "gpt2_tokenizer"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="tiny-gpt2")
    parser.add_argument("--tokenizer", default=str(default_tokenizer))
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    torch.manual_seed(1234)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=64, n_layer=2, n_head=2)
    GPT2LMHeadModel(config).save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
