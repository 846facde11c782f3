"""Fleets: replicas behind one sglang-router, their sweeps and the router's metrics."""
