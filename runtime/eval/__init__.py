"""`runtime eval`: cases, runs, measures and reports (docs/eval.md)."""
