import sys

from tokenload.sim.main import main

sys.exit(main())
