"""The benchmark's own checks: its harness runs and its arithmetic holds (run by the test
command with the rest of the suite; the figures themselves are judged in bench/README.md)."""
