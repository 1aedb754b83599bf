"""A launcher as DeepSpeed's (deepspeed.launcher.launch): start NPROC ranks of the script
given, look at them once a second, and when one fails, terminate the others and exit with
the failed rank's status.  Its env: NPROC (default 2), MASTER_PORT (default 29731)."""
import os
import subprocess
import sys
import time

n = int(os.environ.get("NPROC", "2"))
env = dict(os.environ, MASTER_ADDR="127.0.0.1", WORLD_SIZE=str(n),
           MASTER_PORT=os.environ.get("MASTER_PORT", "29731"))
procs = [subprocess.Popen([sys.executable, "-u", *sys.argv[1:]],
                          env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(n)]
alive = set(procs)
while alive:
    for p in list(alive):
        if p.poll() is None:
            continue
        if p.returncode != 0:
            for q in procs:
                if q.poll() is None:
                    q.terminate()
            for q in procs:
                q.wait()
            sys.exit(p.returncode)
        alive.discard(p)
    time.sleep(1)
