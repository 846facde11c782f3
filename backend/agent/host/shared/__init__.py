"""The host agent's pure helpers, imported by the client too (shipped as specdeck_host.shared)."""
