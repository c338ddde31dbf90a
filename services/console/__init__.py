"""The web console (R17, R18): Settings → Context compaction, the context
inspector and analytics, served by its own process (``python -m services.console``).

Every read and write is made with the signed-in user's API key: releases, sessions and
record read-back through Prepare's HTTP API, which checks scope and grants; the listing
and inspection reads Prepare has no route for go through ``storage.inspection`` only
after the same access decision (``domain.auth``) allowed them.

Security: server-side sessions, a CSRF token and an Origin check on every
state-changing request, security headers, bounded requests — docs/console-security.md.
"""
