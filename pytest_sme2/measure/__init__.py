"""Per-session state and variants (a target bound to a RunSpec) whose runs become Profiles."""
