import sys

from buildctl.cli import main

sys.exit(main())
