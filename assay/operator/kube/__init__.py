"""The one API client: every request the operator sends to the API server goes through here.

`kube` makes the calls (fixed REST paths, plain dicts), `leases` leader election's Lease
calls; both send through `api_client` (the rate limit, Retry-After), which sends on
`api_session`'s connection per thread with what `credentials` read (the service account or a
kubeconfig). `api_errors` reads an error answer's Status once; `refusals` says which are
final. Below everything else in the operator, and knows nothing of it: no labels, no names,
no decisions. The kopf watches are kopf's own client.
"""
