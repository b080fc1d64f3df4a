"""pytest hooks for reports and session outputs (issue 6). Filled in by that work."""
