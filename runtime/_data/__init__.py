"""Data package: pipelines/ and schemas/ inside a wheel."""
