"""Command-line tools (hipep-opt)."""
