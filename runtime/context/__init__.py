"""What a model sees: token counting and the context block format (and, as they land,
fidelity, budget policy, summaries and pointers, assembly, packs and redaction)."""
