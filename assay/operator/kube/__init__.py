"""The one API client: every request the operator sends to the API server goes through here.

`kube` makes the calls (fixed REST paths, plain dicts), `api_session` keeps one connection per
thread, `refusals` reads the API server's Status answers, `leases` makes leader election's
Lease calls (the kubernetes client, its timeouts per call). Below everything else in the
operator, and knows nothing of it: no labels, no names, no decisions. The kopf watches are
kopf's own client.
"""
