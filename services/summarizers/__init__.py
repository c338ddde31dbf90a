"""Summarizer clients of a provider's own SDK, one module each (``anthropic_messages``),
behind the compaction service's port ``domain.compaction.gateway.SummaryGateway``; what
they say (``domain.summarizer.wording``) is the compaction service's, handed in by its
composition root."""
