"""`assay compare`: is the candidate run worse than the baseline, or is it noise?

Paired statistics over the documents both runs evaluated, read from lm-eval-format output
(Assay's or lm-eval 0.4.x's results JSON and samples JSONL). One concept per module:
`distributions` (reference distributions), `statistics` (the paired tests), `clustered`
(standard errors for clustered documents and for groups' subtasks), `corpus` (how each
metric aggregates), `outputs` (reading a run), `pairing` (documents of both runs, per task,
metric and filter), `groups` (a group's number over the paired documents), `verdicts` (what
a result means), `render` (table, JSON, Markdown), `planning` (`--plan`: sizes and
detectable effects) and `command` (the CLI).
It imports neither the engine (assay.runner) nor the operator, and no ML framework.
"""
