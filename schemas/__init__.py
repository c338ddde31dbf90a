"""AgentLoom Context: schemas."""
