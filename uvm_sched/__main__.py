"""``python -m uvm_sched``: the same as the ``uvm-sched`` command."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
