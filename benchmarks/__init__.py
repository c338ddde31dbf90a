"""Benchmarks (not tests): `make bench`."""
