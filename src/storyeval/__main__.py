"""``python -m storyeval`` runs the command-line interface."""

from storyeval.cli import main

main()
