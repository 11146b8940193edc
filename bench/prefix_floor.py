"""The bench's "of floor" column: how close a loglikelihood-type row comes to an ideal prefix cache.

The floor is the compute an optimal radix/prefix cache could not avoid: every distinct token
position of the row's requests runs through the model body once (the nodes of a trie of all
the requests' token sequences, context + continuation, as Assay encodes them), and the LM
head with its log-softmax runs once at every distinct position whose next token is scored.
Both counts are priced at this model's per-token cost, measured in the worker right after
Assay's run on a batch of the row's batch size x the median model input length (best of a few).
"of floor" is that time over the time Assay spent inside the LM's request methods
(`loglikelihood`, `loglikelihood_rolling`: tokenizing, batching and the passes; not start-up,
task building or metrics). 1.0 would be a perfect prefix cache at this batch shape's speed.

Generation rows (`generation_floor`): the distinct prompt tokens (a trie of the prompts, cut as
the generator cuts them) and the tokens generated run through the body once each, and the
head once per generated token, at the same per-token prices; set against the time inside
`generate_until`. A decode step's own costs (one token per row per forward, the per-step
overhead) are not in that price, so the figure says how far a generator stays from
prefill-speed work on the tokens it must compute, not how far from a reachable bound.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

#: (context tokens, continuation tokens), as Assay's encoder hands them to its scorers
TokenPair = tuple[list[int], list[int]]


class Recorder:
    """Keeps the requests the evaluator asks of the LM, the seconds spent answering them, and of
    those the seconds inside the model body's forwards (host time: on a GPU, launches only)."""

    def __init__(self, lm: Any) -> None:
        self.seconds = self.body_seconds = 0.0
        self.requests: dict[str, list[Any]] = {"loglikelihood": [], "loglikelihood_rolling": [], "generate_until": []}
        self.outputs: list[Any] = []  # generate_until's texts, to count the tokens generated
        for method in self.requests:
            self._wrap(lm, method)
        body = getattr(lm.model, lm.model.base_model_prefix)
        started: list[float] = []

        def enter(_module: Any, _args: Any) -> None:
            started.append(time.perf_counter())

        def leave(_module: Any, _args: Any, _out: Any) -> None:
            self.body_seconds += time.perf_counter() - started.pop()

        body.register_forward_pre_hook(enter)
        body.register_forward_hook(leave)

    def _wrap(self, lm: Any, method: str) -> None:
        real: Callable[..., Any] = getattr(lm, method)

        def recorded(requests: Any, *args: Any, **kwargs: Any) -> Any:
            self.requests[method].extend(requests)
            start = time.perf_counter()
            try:
                out = real(requests, *args, **kwargs)
                if method == "generate_until":
                    self.outputs.extend(out)
                return out
            finally:
                self.seconds += time.perf_counter() - start

        setattr(lm, method, recorded)


def token_pairs(lm: Any, recorder: Recorder) -> list[TokenPair]:
    """The recorded requests as Assay's HF model tokenizes them: pairs, and rolling texts' windows."""
    from assay.runner.models.token_pairs import rolling_windows

    pairs = lm.encoder.encode_pairs([(r.context, r.continuation) for r in recorder.requests["loglikelihood"]])
    for tokens in lm.encoder.encode_many([r.text for r in recorder.requests["loglikelihood_rolling"]]):
        pairs.extend(rolling_windows(tokens, prefix_token=lm.prefix_token_id, max_seq_len=lm.max_length))
    return pairs


def trie_counts(pairs: Sequence[TokenPair], max_length: int) -> tuple[int, int]:
    """(nodes of the trie of every pair's context + continuation, distinct positions that score a token).

    Each sequence is cut as the scorers cut it, to its last max_length + 1 tokens. A scored
    position is the trie node whose next token is a continuation token: sequences sharing it
    share its logits.
    """
    root: dict[int, Any] = {}
    nodes = 0
    scored: set[int] = set()
    for context, continuation in pairs:
        sequence = (context + continuation)[-(max_length + 1) :]
        first_scored = len(sequence) - len(continuation)
        node = root
        for position, token in enumerate(sequence):
            if position >= first_scored and position > 0:
                scored.add(id(node))
            if token not in node:
                node[token] = {}
                nodes += 1
            node = node[token]
    return nodes, len(scored)


def per_token_seconds(lm: Any, batch: int, length: int, repeats: int = 5) -> tuple[float, float]:
    """(model body, LM head + log-softmax) seconds per token on a batch x length input; best of `repeats`."""
    import torch

    from assay.runner.models.hf.head_logprobs import HeadLogprobs

    model = lm.model
    body = getattr(model, model.base_model_prefix)
    head = model.get_output_embeddings()
    device = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (batch, length), device=device)
    head_positions = min(length, 256)  # the plain head path's chunk

    def best(step: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return min(times[1:])

    with torch.inference_mode():
        hidden = body(ids, use_cache=False).last_hidden_state
        body_s = best(lambda: body(ids, use_cache=False))
        part = hidden[:, :head_positions]
        head_s = best(lambda: head(part).float().log_softmax(-1))
        # the head as Assay's rolling windows run it where it can (a vocabulary block at a
        # time, bit for bit the same logits): the floor is the faster of the two prices
        blocked = HeadLogprobs(head, device=device, softmax_dtype=None)
        if blocked.blocked:
            rows = part.reshape(-1, part.shape[-1])
            targets = torch.zeros(rows.shape[0], dtype=torch.long, device=device)
            head_s = min(head_s, best(lambda: blocked(rows, targets)))
    return body_s / (batch * length), head_s / (batch * head_positions)


def measure(lm: Any, recorder: Recorder, batch: int) -> dict[str, Any] | None:
    """The row's floor and what it is made of; None where the row has no loglikelihood requests."""
    lm_s, body_s_run = recorder.seconds, recorder.body_seconds  # before this function's own forwards
    if recorder.requests["generate_until"]:
        import generation_floor

        return generation_floor.measure(lm, recorder, batch, per_token_seconds, trie_counts)
    pairs = token_pairs(lm, recorder)
    if not pairs:
        return None
    nodes, scored = trie_counts(pairs, lm.max_length)
    # the model input of a pair is its sequence less the last token, at most max_length long
    length = int(statistics.median(min(len(c) + len(t) - 1, lm.max_length) for c, t in pairs))
    body_s, head_s = per_token_seconds(lm, batch, max(length, 1))
    return {
        "floor_s": nodes * body_s + scored * head_s,
        "lm_s": lm_s,
        "body_s": body_s_run,
        "trie_tokens": nodes,
        "scored_positions": scored,
        "request_tokens": sum(min(len(c) + len(t), lm.max_length + 1) for c, t in pairs),
        "median_length": length,
        "body_s_per_token": body_s,
        "head_s_per_token": head_s,
    }


def describe(floor: dict[str, Any]) -> str:
    """One line under the row: the floor's counts and prices, and Assay's time they are set against."""
    if "generated_tokens" in floor:
        return (
            f"floor: {floor['prompt_trie_tokens']} distinct prompt tokens of {floor['request_tokens'] - floor['generated_tokens']} "
            f"prompted, {floor['generated_tokens']} generated, median prompt {floor['median_length']}; "
            f"{floor['body_s_per_token'] * 1e6:.1f} + {floor['head_s_per_token'] * 1e6:.1f} us/token (body + head) "
            f"= {floor['floor_s']:.3f} s; assay in generate_until {floor['lm_s']:.2f} s, of it in body forwards {floor['body_s']:.2f} s"
        )
    return (
        f"floor: {floor['trie_tokens']} trie tokens of {floor['request_tokens']} requested, "
        f"{floor['scored_positions']} scored positions, median length {floor['median_length']}; "
        f"{floor['body_s_per_token'] * 1e6:.1f} + {floor['head_s_per_token'] * 1e6:.1f} us/token (body + head) "
        f"= {floor['floor_s']:.3f} s; assay in LM calls {floor['lm_s']:.2f} s, of it in body forwards {floor['body_s']:.2f} s"
    )
