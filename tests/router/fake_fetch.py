"""A download process for tests/router/test_downloads.py: it reads its job, prints a line that is no report (as a
library may), reports one file done, and exits 0 (``LFMSERVE_FAKE_FETCH_EXIT``: with that status)."""

import json
import os
import sys

job = json.loads(sys.stdin.read())
print("a line of the hub's library", flush=True)
print(json.dumps({"url": f"http://hub/{job['repo']}/{job['files'][0]}", "done": 3, "total": 3}), flush=True)
sys.exit(int(os.environ.get("LFMSERVE_FAKE_FETCH_EXIT", "0")))
