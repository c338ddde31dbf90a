"""Analytics: tumbling-window rollups of ``ctx.observability`` and the dead-letter topic."""
