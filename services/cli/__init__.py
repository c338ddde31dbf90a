"""``agentloom``: the operator CLI. One module per command group."""
