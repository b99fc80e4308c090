"""Host-side harness for the xpfo kernel: config, build, guest, tests, benchmarks."""
