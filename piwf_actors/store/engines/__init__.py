"""The database engines the store runs on: one `Engine` object per engine, the only code that knows which.

- `base.py`: what every engine answers (`Engine`), the location of a database on a server
  (`ServerDatabase`), the connection the store's SQL runs on (`Connection`), `engine_of(conn)`;
- `sqlite.py` (with `sqlite_file.py`, `sqlite_history.py`) and `postgresql.py` (with
  `pg_connection.py`, `pg_schema.py`): the engines;
- `registry.py`: the list of engines, and the lookups by location, URL scheme and name;
- `transfer.py`: `piwf state migrate`, a copy from one engine into the other.

This module imports nothing, so that importing `registry` (which `paths.py` does to read a database
URL) pulls in no driver: each engine imports its driver (peewee, psycopg) when it first connects.
"""
