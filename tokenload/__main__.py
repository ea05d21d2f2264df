import sys

from tokenload.cli import main

sys.exit(main())
