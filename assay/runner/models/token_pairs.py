"""A loglikelihood request in token ids, and the ways lm-eval's backends cut token sequences.

Every backend scores (context tokens, continuation tokens) pairs. The rules here are the ones
that two or more backend families apply the same way, so each lives once: the disjoint
rolling windows of a perplexity text (hf, api, vllm), and the left truncation of a pair for
backends that read a server's prompt logprobs (api, vllm).
"""

from __future__ import annotations

#: (context, continuation) as token ids; the continuation's log-probability is what is scored
TokenPair = tuple[list[int], list[int]]


def rolling_windows(tokens: list[int], *, prefix_token: int, max_seq_len: int) -> list[TokenPair]:
    """Disjoint windows covering `tokens`, each predicting up to max_seq_len of them.

    lm-eval's rolling windows with context_len=1, made disjoint: every token is predicted
    once. The first window predicts the first max_seq_len tokens from the prefix token; each
    later one the next (up to) max_seq_len, conditioned on the tokens before them so that the
    model input stays max_seq_len long. Backends differ only in max_seq_len: max_length for
    hf, max_length-2 for api and vllm (as lm-eval's).
    """
    if not tokens:
        return []
    first = min(max_seq_len, len(tokens))
    windows: list[TokenPair] = [([prefix_token], tokens[:first])]
    done = first
    while done < len(tokens):
        end = min(len(tokens), done + max_seq_len)
        windows.append((tokens[max(0, end - max_seq_len - 1) : done], tokens[done:end]))
        done = end
    return windows


def left_truncated(pair: TokenPair, limit: int) -> tuple[list[int], int]:
    """(the last `limit` tokens of context + continuation, how many of them are context).

    lm-eval's rule where a prompt's logprobs are read back (its API and vLLM backends): the
    whole pair is sent as one prompt, and its oldest context tokens are dropped to fit.
    """
    ctx, cont = pair
    return (ctx + cont)[-limit:], len(ctx) - max(0, len(ctx) + len(cont) - limit)
