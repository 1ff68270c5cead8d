"""The servers a team would pick instead of ours, each run in its own venv by serve_bench.py."""
