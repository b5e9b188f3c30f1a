"""`python -m gqc` runs the command line as `gqc` does."""

from gqc.cli import main

main()
