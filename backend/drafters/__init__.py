"""Drafter checkpoints: reading and comparing them, where they come from, downloading them."""
