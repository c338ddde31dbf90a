"""AgentLoom Context: storage."""
