"""200 randomized inject/verify/revert cycles over every fault type this machine can
run: 50 with the controller SIGKILLed, 50 signal storms (1-5 SIGINT/SIGTERM at random
moments of inject, verify and revert), 20 with the lease record deleted or truncated,
10 into a full lease folder. Prints the report; exits 1 on any residue, error, or exit
code that does not match the state left.

    sudo python3 perf/chaos.py [--cycles 200 --kills 50 --storms 50 --damaged 20 --full 10 --seed 0]
"""

import sys

from faultlab.chaos import main

if __name__ == "__main__":
    sys.exit(main())
