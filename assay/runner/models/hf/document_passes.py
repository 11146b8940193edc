"""Which requests run together on the model, decided from their tokens alone (no model here).

A multiple-choice document's choices share a context (`plan_shared` groups them); documents
whose contexts begin with the same few-shot tokens share a prefix (`by_prefix`, in context
token order, so one prefix's documents come together); and `passes` gathers the groups into
passes of documents for `shared_context.SharedContextScorer`: one-request documents on a
prefix as one batch of rows on its cache, other documents as a batch whose contexts run
together (a short prefix is not worth running them apart: `on_prefix`), longest first
(`batch_order`), with one LM-head call per pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from assay.runner.models.token_pairs import TokenPair

# below this many shared tokens a prefix pass saves less than it costs
MIN_SHARED_PREFIX = 16


def _by_context(reps: Sequence[int], pairs: Sequence[TokenPair], max_length: int) -> dict[tuple[int, ...], list[int]]:
    """`reps` by context, in `reps` order. Only rows that are not left-truncated qualify: a
    truncated row's context is not the same tokens across choices."""
    by_context: dict[tuple[int, ...], list[int]] = {}
    for index in reps:
        ctx, cont = pairs[index]
        if ctx and len(ctx) + len(cont) - 1 <= max_length:
            by_context.setdefault(tuple(ctx), []).append(index)
    return by_context


def plan_shared(
    reps: Sequence[int], pairs: Sequence[TokenPair], max_length: int
) -> tuple[list[tuple[list[int], list[int]]], list[int]]:
    """((group, prefix) to score on a cache, the rest for batched full passes) among `reps`.

    A group is requests with one context (a document's choices) or a lone request (a
    document whose choices are one token each, which lm-eval's grouping already folds into
    one row) whose context shares a few-shot prefix with others; lone requests without one
    stay batched. The rest keep `reps` order.
    """
    candidates = list(_by_context(reps, pairs, max_length).values())
    planned = [(group, prefix) for group, prefix in by_prefix(candidates, pairs) if len(group) > 1 or prefix]
    taken = {index for group, _ in planned for index in group}
    return planned, [index for index in reps if index not in taken]


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def by_prefix(groups: Sequence[list[int]], pairs: Sequence[TokenPair]) -> list[tuple[list[int], list[int]]]:
    """(group, the context prefix it shares with neighbouring groups, or []) in context token order.

    Sorted by context tokens, documents with one few-shot prefix are adjacent; a run of
    neighbours sharing at least MIN_SHARED_PREFIX tokens shares the run's common part, cut
    so that every context keeps a token of its own.
    """
    contexts = [pairs[group[0]][0] for group in groups]
    order = sorted(range(len(groups)), key=lambda i: contexts[i])
    runs: list[tuple[list[int], int]] = []  # (members in order, common length)
    for index in order:
        if runs:
            members, common = runs[-1]
            shared = min(common, common_length(contexts[members[-1]], contexts[index]))
            if shared >= MIN_SHARED_PREFIX:
                runs[-1] = (members + [index], shared)
                continue
        runs.append(([index], len(contexts[index])))
    planned: list[tuple[list[int], list[int]]] = []
    for members, common in runs:
        size = min([common] + [len(contexts[i]) - 1 for i in members]) if len(members) > 1 else 0
        prefix = contexts[members[0]][:size] if size >= MIN_SHARED_PREFIX else []
        planned.extend((groups[i], prefix) for i in members)
    return planned


HEAD_POSITIONS = 512
"""Bound on the scored positions gathered for one LM-head call: 512 × a 50k vocabulary in
float32 is 100 MB of logits."""

Planned = tuple[list[int], list[int]]  # (a group of requests with one context, its shared prefix or [])


def on_prefix(group: Sequence[int], prefix: Sequence[int], pairs: Sequence[TokenPair]) -> bool:
    """Whether a group runs on its prefix's cache rather than with its whole context in a
    batch of documents: a one-request document on any prefix (a row on the prefix), others
    when the prefix is at least half the context. A shorter one (neighbours that share a first
    shot's opening words) saves less than a batch gains over a document run alone."""
    if not prefix:
        return False
    return len(group) == 1 or 2 * len(prefix) >= len(pairs[group[0]][0])


def batch_order(planned: Sequence[Planned], pairs: Sequence[TokenPair]) -> list[Planned]:
    """`planned` with the groups that run on a prefix first, one prefix after another (one
    prefix cache held at a time), then the others; the first by context length, the others by
    their width with their choices (`document_width`), longest first: padded batches of
    documents then waste little."""
    kept = [(group, prefix) for group, prefix in planned if on_prefix(group, prefix, pairs)]
    rest = [(group, prefix) for group, prefix in planned if not on_prefix(group, prefix, pairs)]
    runs: list[int] = []  # the index of each kept group's run of one prefix
    for index, (_, prefix) in enumerate(kept):
        runs.append(runs[-1] + (prefix != kept[index - 1][1]) if runs else 0)
    # within one prefix's run, longest context first too: its rows are batched
    kept = [kept[i] for i in sorted(range(len(kept)), key=lambda i: (runs[i], -len(pairs[kept[i][0][0]][0])))]
    return kept + sorted(rest, key=lambda item: -document_width(item[0], pairs))


def document_width(group: Sequence[int], pairs: Sequence[TokenPair]) -> int:
    """A document's tokens in a packed row: its context, then its members' tails (each
    continuation less its last token) as a trie, choices that begin alike sharing tokens."""
    tails = {tuple(pairs[i][1][: k + 1]) for i in group for k in range(len(pairs[i][1]) - 1)}
    return len(pairs[group[0]][0]) + len(tails)


def passes(planned: Sequence[Planned], pairs: Sequence[TokenPair], size: int) -> Iterator[tuple[str, list[Planned]]]:
    """`planned` in order, gathered into passes of up to `size` documents: ("rows", …) for
    one-request documents on one prefix, run as one batch of rows on its cache; ("groups", …)
    for the others, each its own body passes, then one LM-head call for all (at most
    HEAD_POSITIONS scored positions)."""
    kind_now, positions = "", 0
    current: list[Planned] = []
    for group, prefix in planned:
        kind = "rows" if len(group) == 1 and prefix else "groups"
        scored = sum(len(pairs[i][1]) for i in group)
        if current and (
            kind != kind_now
            or len(current) >= size
            or (kind == "rows" and prefix != current[0][1])
            or (kind == "groups" and positions + scored > HEAD_POSITIONS)
        ):
            yield kind_now, current
            current, positions = [], 0
        current.append((group, prefix))
        kind_now, positions = kind, positions + scored
    if current:
        yield kind_now, current


TAIL_PASS_COST = 64
"""What one more pass of choice tails costs, in padded tokens: its calls through the model's
layers and its own copy of the contexts' cache."""


def tail_passes(lengths: Sequence[int]) -> list[list[int]]:
    """The indices of the non-empty tails among `lengths`, in passes: longest first, each pass
    padded to its longest tail, cut where that padding would cost more than another pass
    (`TAIL_PASS_COST`). The least total cost over all cuts, by dynamic programming."""
    order = sorted((i for i, n in enumerate(lengths) if n), key=lambda i: -lengths[i])
    best = [0] * (len(order) + 1)  # best[j]: the least cost of the first j tails of `order`
    start = [0] * (len(order) + 1)  # start[j]: where the last pass of that best starts
    for j in range(1, len(order) + 1):
        best[j], start[j] = min((best[i] + TAIL_PASS_COST + (j - i) * lengths[order[i]], i) for i in range(j))
    chunks: list[list[int]] = []
    j = len(order)
    while j:
        chunks.append(order[start[j] : j])
        j = start[j]
    return chunks[::-1]
