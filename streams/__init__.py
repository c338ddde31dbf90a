"""AgentLoom Context: streams."""
