"""Entry point: ``agentloom-processor`` (or ``python -m streams``); wiring in
``streams.bootstrap``."""

from __future__ import annotations

from streams.bootstrap import main

if __name__ == "__main__":
    main()
