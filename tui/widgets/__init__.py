"""Widgets shared by the shell and the tabs."""
