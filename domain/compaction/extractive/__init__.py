"""The built-in extractive summarizer (R11.3 default adapter and test double): no model,
deterministic. ``draft`` builds a segment's draft from fragments (``builder``; an earlier
summary's entries: ``entries``): a structural floor (``floor``), then the most salient
rest of the tool output (``fill``, ``salience``); ``signals`` tells error lines by their
shape and ``segmentation`` splits and measures text in any language."""

from domain.compaction.extractive.draft import MAX_ARTIFACT_REFS, extract_draft

__all__ = ["MAX_ARTIFACT_REFS", "extract_draft"]
