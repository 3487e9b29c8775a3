"""Governance: what may be shown to a model and the record of what was (the provenance ledger)."""
