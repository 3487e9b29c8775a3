"""The action contract and the action registry: what every other layer agrees on.

Below both the pipeline format (whose schema and checks are generated from the
registry) and the engine (which runs actions through this contract).
"""
