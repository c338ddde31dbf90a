"""How every service's process sets itself up at start: its garbage collector's young
threshold (``collector``) and its CPU scheduling policy (``cpu_policy``)."""
