"""Typed answers of the Prepare service: one pydantic model per 2xx response body, the
``response_model`` of its route and the schema ``docs/openapi.json`` publishes."""
