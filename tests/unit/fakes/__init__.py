"""In-memory fakes of our ports, for unit tests of the orchestration (issue 11).

One module per port family: ``publisher`` (the Kafka port), and the repositories of
each service beside it. A fake keeps what it was given in plain lists and dicts so a
test can assert on it; it implements the same Protocol as the real adapter (mypy
checks that where a test passes a fake for a port).
"""
