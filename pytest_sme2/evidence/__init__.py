"""Reading what a run leaves behind: ETDump, instruction counts, kernel names and samples, operator identity, the
category table."""
