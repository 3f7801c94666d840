"""The application layer: what fabricwatch does for a person (the demo, scoring against ground truth,
reports), built from the stages below it. Nothing in the core or the stages imports it."""
