"""The tabs (one module each: drafters, compare, serve, live, history) and the shell's modal screens."""
