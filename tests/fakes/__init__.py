"""Fake platform servers for tests: real HTTP on 127.0.0.1 that enforce the documented rules."""
