"""pytest hooks for baselines and regression verdicts (issue 5). Filled in by that work."""
