"""classifiers package."""
