import sys

from tokenload.mock.server import main

sys.exit(main())
