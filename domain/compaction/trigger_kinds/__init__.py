"""Trigger kinds (R7): one module per condition that may start a compaction, each a
``TriggerKind`` registered in ``table.TRIGGER_KINDS``; ``domain.compaction.triggers``
evaluates them in the table's order."""
