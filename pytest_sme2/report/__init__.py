"""Reports people read, one job per module.

- record.py: Profiles -> a test record (JSON-ready; SME2 on/off comparisons)
- table.py: number formats and the one summary table
- charts.py: matplotlib charts as embedded images
- html.py: pytest-html section and the session page
- markdown.py: summary.md for CI job summaries
- text.py: the plain-text section of a failing test
- advice.py: recommendations read off a record
- csv_export.py: the reference kit's timeline and ops-stats CSVs
- summary.py: summary.json (schema in docs/artifacts.md) and rendering a session from it
"""
