"""The operator's API calls: every request the operator sends to the API server goes through here.

`kube` makes the calls (fixed REST paths, plain dicts), `leases` leader election's Lease
calls; both send through `api_client`, the operator's one `assay.kube` client (its
credentials, its name, its rate limit from `rate_limit`). `assay.kube.api_errors` reads an
error answer's Status once; `refusals` says which are final. Below everything else in the
operator, and knows nothing of it: no labels, no names, no decisions. The kopf watches are
kopf's own client, logged in on the same credentials (`handlers.login`).
"""
