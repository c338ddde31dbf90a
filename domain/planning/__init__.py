"""Planning one consumed batch, pure: its state (``state``), the rules of a run's
lifecycle (``lifecycle``) and the plan over the batch (``batch``)."""
