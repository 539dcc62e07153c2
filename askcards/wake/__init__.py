"""The wake path: the process's registry of parked waiters by key (``hub``), the Redis pub/sub bus
between processes (``bus``), and the keys and messages published (``events``).
"""
