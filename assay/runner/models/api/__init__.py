"""The API backends: a served model over HTTP, giving lm-eval's TemplateAPI numbers.

`completions` (local-/openai-completions) and `chat` (local-/openai-chat-completions) are
the backends; `args` checks their model_args, `client` sends the requests, `tokenizer`
counts tokens locally.
"""
