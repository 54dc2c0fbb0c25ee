"""``python -m shardforge``: the ``shardforge`` command (``shardforge.cli``), for a checkout or an environment
whose scripts folder is not on the PATH."""

import sys

from shardforge.cli import main

if __name__ == "__main__":
    sys.exit(main())
