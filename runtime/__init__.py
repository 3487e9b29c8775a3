"""step-runtime: a declarative step runtime for context-engineered LLM pipelines."""
