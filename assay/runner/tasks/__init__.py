"""Stage 1: tasks — the index, YAML and typed config, templates, prompts, few-shot, the Task."""
