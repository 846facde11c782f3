"""Settings: the config model, the config file (found, loaded, saved), its strict validation and the init template."""
