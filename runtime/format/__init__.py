"""The pipeline format: source positions, loading, `extends`, the pipeline model, the
generated schema, graph checks, validation, diagnostics and their renderers, drawings.

Knows nothing of execution.
"""
