"""AgentLoom Context: services."""
