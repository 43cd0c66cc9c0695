"""``python -m agent`` is ``kloop``."""

from agent.cli import main

main()
