"""The worker side: the process that executes runs, and the host's handle on it."""
