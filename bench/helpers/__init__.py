"""What several benchmarks share. A folder, not a `bench/*.py` file: `make bench` runs every one of those.

A benchmark imports it as `bench.helpers` with the repository root on its path (it runs with
`python -P`, so the bench folder itself is never on the path and no script shadows a module).
"""
