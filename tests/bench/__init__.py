"""The benchmarks (``bench_*.py``). What more than one of them uses is in ``harness.py`` (processes,
servers, clients, the fixture seeder) and ``common.py`` (the report: rounds, machine line, figures)."""
