"""The `vllm` backend: vLLM's engine in this process, giving lm-eval's `vllm` numbers.

`engine.VLLMLM` is the backend, `args` its model_args. This package is
`assay.runner.models.vllm`; `import vllm` inside it is absolute and finds the vLLM library.
"""
