"""`python -m runtime`."""

from runtime.cli import main

main()
