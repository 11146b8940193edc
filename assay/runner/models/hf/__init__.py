"""The `hf` backend: Hugging Face transformers models, giving lm-eval's HFLM numbers.

`model.HFLM` is the backend; `args` checks its model_args, `loading` builds the model and
tokenizer, `scoring` runs loglikelihood (with `shared_context` and `rolling` for speed),
`generation` runs generate_until (with `prompt_prefix`). Nothing here is imported with the
package, so `assay.runner.models.hf.args` stays importable without loading the model code.
"""
