"""The sandbox: a local Hub, a simulated GPU host and the fixtures they serve."""
