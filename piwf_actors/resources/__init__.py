"""Resource managers' rules that are neither SQL nor I/O: results, status patches, back-off, ids.

The write commands (store/commands/resources.py, store/commands/reconciles.py) and the worker
(worker/reconcile.py) both follow these; every function is pure and takes the time it needs
as an argument.
"""
