"""A task YAML of the suite's own that tests hand the operator and the runner (arc_easy's data, another prompt)."""

from __future__ import annotations

# A task of the suite's own: arc_easy's data with another prompt.
ARC_QA = """\
task: arc_easy_qa
tag: [suite_qa]
dataset_path: allenai/ai2_arc
dataset_name: ARC-Easy
output_type: multiple_choice
test_split: test
doc_to_text: "Q: {{question}}\\nA:"
doc_to_target: "{{choices.label.index(answerKey)}}"
doc_to_choice: "{{choices.text}}"
metric_list:
  - metric: acc
"""
