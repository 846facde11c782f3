"""Tuning: the advisor's ranking of speculative settings and the sweeps that measure them."""
