"""``python -m storyeval`` runs the command-line interface."""

from storyeval.cli import main

if __name__ == "__main__":  # importing this module (documentation tools do) runs nothing
    main()
