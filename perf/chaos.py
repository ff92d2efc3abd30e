"""200 randomized inject/verify/revert cycles (50 with the controller SIGKILLed) over
every fault type this machine can run; prints the report and exits 1 on any residue.

    sudo python3 perf/chaos.py [--cycles 200 --kills 50 --seed 0]
"""

import sys

from faultlab.chaos import main

if __name__ == "__main__":
    sys.exit(main())
