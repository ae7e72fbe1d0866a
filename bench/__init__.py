"""Airlock's benchmark (`python -m bench.run`); not part of the product or the test suite."""
