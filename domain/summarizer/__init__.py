"""The summarizer's request when it continues the agent's own (``fork.py``): built from the
agent's last rendered request, so it sits above ``domain.compaction`` and
``domain.context`` (whose drafts and provider renderings it reads), not in
``domain.caching`` (which both of those import)."""
