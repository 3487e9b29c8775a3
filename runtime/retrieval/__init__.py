"""Retrieval: the node store (rows and writes, search passes, reading a question), the
indexer and embeddings."""
