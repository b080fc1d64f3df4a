"""Model to .pte: recipes, the content-addressed cache and its key, program checks, operator work, the reference
program."""
