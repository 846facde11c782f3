"""Measuring a server: benches and their records, metrics, latency, live feeds, break-even, cost."""
