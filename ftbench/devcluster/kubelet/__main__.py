"""``python -m ftbench.devcluster.kubelet``: how ``ftbench dev up`` and the tests start the kubelet."""

import sys

from ftbench.devcluster.kubelet.cli import main

sys.exit(main())
