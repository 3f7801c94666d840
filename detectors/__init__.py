"""Detection: pure functions over a window of typed rows that return findings, then localisation and
correlation of findings into incidents."""
