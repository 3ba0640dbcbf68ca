"""The base of every table model (store/schema.py and its parts): unbound, so each query runs through
an explicit database or connection (two hosts can live in one process, each with its own file)."""

from __future__ import annotations

from typing import Any, ClassVar

import peewee as pw


class Base(pw.Model):
    # peewee's metaclass sets it on every model: the SchemaManager whose DDL the migrations run. Its
    # stubs do not declare it.
    _schema: ClassVar[Any]

    class Meta:
        database = None
        legacy_table_names = False
