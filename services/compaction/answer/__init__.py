"""The model summarizer's answer (``read``)."""
