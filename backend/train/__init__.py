"""Training a drafter with SpecForge: the runs and what they are predicted to take."""
