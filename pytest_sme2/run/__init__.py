"""Where a .pte runs: targets, the native runner and its build, emulation setup, callgrind, CPU facts."""
