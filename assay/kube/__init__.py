"""The one Kubernetes API client of the product: the operator, the runner's status sink and
baseline reader, and `assay get/results/logs/describe` all reach the API server through it.

`client.ApiClient` sends a request (Retry-After honoured, an optional rate limit) on
`api_session`'s connection per thread (or a connection of its own for a streamed answer),
with what `credentials` read: the pod's service account (its token read again as it
rotates) or a kubeconfig (its contexts, client certificates, tokens, exec plugins). Every
error answer is read once, by its Status, into `api_errors.ApiError` (code, reason, message);
a server that cannot be reached raises one of `api_session.UNREACHABLE`. Callers decide on
those types, never on the words of an answer.

At the bottom of the product with the spec: it knows no Evaluation, no label and no
decision. The `kubernetes` package is imported nowhere (an import contract says so).
"""
