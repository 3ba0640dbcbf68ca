"""The durable store: the only package that touches SQL.

It holds the SQLite schema and its migrations, content-addressed blobs, the
named write commands the writer applies in batches, and the read queries the
host, client and console use. This module imports nothing on purpose, so that
importing a submodule never pulls in the rest of the store (or a cycle).
"""
