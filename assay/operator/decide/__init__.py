"""Pure decisions: what to do, or what to say, given what was observed.

`trigger` (whether a run must be decided), `reconcile` (the plan: what to create, what to
delete, the status to write), `conditions` (phase, reason and conditions from a Job),
`diagnosis` and `pod_start` (what keeps a run's pods from going on), `outcome` (how a
finished run ended), `peer_failures` (a rank stopping for a peer's failure, bounded),
`large_specs` (what is kept in memory of a large spec). Functions of their arguments, the
clock passed in (`now`): no API call, no thread; `runtime` carries the decisions out.
"""
