"""The host agent: a small stdlib process on the GPU host, and the client that talks to it."""
