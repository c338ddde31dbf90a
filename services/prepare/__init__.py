"""Prepare service: HTTP API answering "what does this model call see?"."""
