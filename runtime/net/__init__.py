"""What crosses the network: a whole-request deadline for HTTP calls, credential-free URLs,
and the scrubber that keeps configured secrets out of everything stored or printed.

Below both `runtime.models` (chat completions) and `runtime.retrieval` (the embeddings
endpoint), so the two HTTP clients share one deadline and one scrubber. Imports no HTTP
client at module level.
"""
