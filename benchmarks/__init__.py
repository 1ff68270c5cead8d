"""Benchmarks: each script prints ratios measured side by side in one run (README.md here)."""
