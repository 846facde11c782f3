"""Serving: a profile's server started, watched and stopped on one host or across nodes."""
