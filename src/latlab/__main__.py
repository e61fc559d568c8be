"""``python -m latlab``."""

from latlab.cli import main

main()
