"""The `specdeck` command: one module per command group, all calling the same backend as the TUI."""
