"""``python -m uvm_sched.cli``: the same as the ``uvm-sched`` command."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
