"""Locking: resolving floating pins, the lock file, its checks, and lock-time probes of the base."""
