"""Provider formats: one module per request format (render, sent roles, cache
lifetimes), registered in ``table.FORMAT_TABLE``."""
