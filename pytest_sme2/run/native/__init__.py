"""The native runner: C++ source, SME2-masking preload library, and their build."""
