"""``python -m sandbox.shell --config FILE``: run one command of the agent's shell (see sandbox.shell)."""

import sys

from sandbox.shell.runner import main

if __name__ == "__main__":
    sys.exit(main())
