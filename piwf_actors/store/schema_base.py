"""The base of every table model (store/schema.py and its parts): unbound, so each query runs through
an explicit database or connection (two hosts can live in one process, each with its own file)."""

from __future__ import annotations

import peewee as pw


class Base(pw.Model):
    class Meta:
        database = None
        legacy_table_names = False
