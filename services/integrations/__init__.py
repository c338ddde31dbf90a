"""Adapters for the agent frameworks people already run: an OpenAI Agents SDK session
(``openai_agents``, extra ``agentloom-context[openai-agents]``) and a LangChain agent
middleware (``langchain``, extra ``agentloom-context[langchain]``)."""
