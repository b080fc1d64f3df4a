"""Judging profiles against stored baselines, plain Python without pytest: records, store, verdicts, findings,
history, assertions."""
