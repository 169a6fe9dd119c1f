"""Benchmarks and chaos runs, one command each (`python benchmarks/<name>.py`, the modules with
a `main`; chaos.py also runs chaos_operator and chaos_restarts); the other modules are their
shared parts. Results: docs/performance.md, docs/reliability.md."""
