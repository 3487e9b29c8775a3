"""`runtime serve`: the HTTP server, its runs API and the run inspector (issue 33)."""
