"""``python -m ftbench_devcluster.kubelet``: how ``ftbench dev up`` and the tests start the kubelet."""

import sys

from ftbench_devcluster.kubelet.cli import main

sys.exit(main())
