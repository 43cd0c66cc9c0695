"""``python -m sandbox.jail CONFIG_FD CONTROL_FD STATUS_FD``: the jail's init (started by Jail.start)."""

import sys

from sandbox.jail.init import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
