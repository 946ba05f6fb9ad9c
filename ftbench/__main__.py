import sys

from ftbench.cli import main

sys.exit(main())
