"""``agentloom``: the operator CLI (issue 14). One module per command group."""
