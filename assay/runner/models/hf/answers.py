"""One `loglikelihood` call's answers, filled in as its passes finish.

The scorer runs one representative per set of requests that share a pass (lm-eval's logits
cache: the same context and continuation up to its last token, as MMLU's " A"/" B"/" C"/" D"),
and each member reads its own continuation's tokens off its representative's positions.
Whoever listens (progress bars, answer sinks) hears each pass's answers once, as it ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from assay.runner.models.hf.shared_context import PassScores, Scored
from assay.runner.models.instance import LoglikelihoodResult
from assay.runner.models.token_pairs import TokenPair

#: told each batch's finished (index in the pairs, result) pairs: progress bars, answer sinks
OnDone = Callable[[Sequence[tuple[int, LoglikelihoodResult]]], None]


def ignore(done: Sequence[tuple[int, LoglikelihoodResult]]) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Answers:
    """Where one call's results go: its requests' token pairs, their results by index (None
    until answered) and the listener told of each pass's."""

    pairs: Sequence[TokenPair]
    members_of: dict[int, list[int]]  # per representative: the requests its pass answers
    results: list[LoglikelihoodResult | None]
    on_done: OnDone

    def from_log_probs(self, reps: Sequence[int], scored: Sequence[Scored]) -> None:
        """Each representative's members from its log-probs at its continuation's positions."""
        done: list[tuple[int, LoglikelihoodResult]] = []
        for rep, (logprobs, greedy) in zip(reps, scored, strict=False):
            for member in self.members_of[rep]:
                cont = self.pairs[member][1]
                n = len(cont)
                target = torch.tensor(cont, dtype=torch.long, device=logprobs.device)
                picked = logprobs[-n:].gather(1, target.unsqueeze(1)).squeeze(1)
                done.append((member, LoglikelihoodResult(float(picked.sum()), bool((greedy[-n:] == target).all()))))
        self._finish(done)

    def from_pass(self, groups: Sequence[Sequence[int]], scores: PassScores) -> None:
        """The members of a pass of documents' groups (of representatives), each from the last
        of its representative's rows, as many as its own continuation's tokens."""
        members = [
            (rows, member)
            for group, rows_of in zip(groups, scores.rows_of, strict=False)
            for rep, rows in zip(group, rows_of, strict=False)
            for member in self.members_of[rep]
        ]
        conts = [self.pairs[member][1] for _, member in members]
        answers = scores.answers(
            [(rows[len(rows) - len(cont) :], cont) for (rows, _), cont in zip(members, conts, strict=False)]
        )
        self._finish(
            [(member, LoglikelihoodResult(*answer)) for (_, member), answer in zip(members, answers, strict=False)]
        )

    def _finish(self, done: list[tuple[int, LoglikelihoodResult]]) -> None:
        for member, result in done:
            self.results[member] = result
        # once per pass: a representative's members are final with it
        self.on_done(done)
