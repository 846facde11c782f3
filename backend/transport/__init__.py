"""Ways to reach a host: this machine (``local``) or SSH. Both give the same face (see ``base``)."""
