"""What every stage uses: writing files without following links, the one lock, supervised processes, writable
folders, file-safe names, ELF reading."""
