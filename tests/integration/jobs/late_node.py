"""collectives.py, whose ranks on the node started with NODE_TAG=1 start late: they compute
(as a slow ``import torch`` on a loaded machine does) until the file GO_FILE exists."""

import os
import runpy
import time
from pathlib import Path

if os.environ.get("NODE_TAG") == "1":
    go = Path(os.environ["GO_FILE"])
    spun = 0
    while not go.exists():  # a fifth of a core: computing to the supervisor (its rule
        end = time.monotonic() + 0.01  # asks for 5% of one), and cheap beside the others
        while time.monotonic() < end:
            spun += 1  # CPU, not sleep: a process on its way, not a stuck one
        time.sleep(0.04)

runpy.run_path(str(Path(__file__).with_name("collectives.py")), run_name="__main__")
