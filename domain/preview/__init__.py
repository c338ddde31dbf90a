"""What a draft policy would do, before it is published: its issues, its projected gain
and cache savings, a dry run over a session's records, and the settings page's form.
Above ``domain.compaction`` and ``domain.context``, whose rules it runs unchanged."""
