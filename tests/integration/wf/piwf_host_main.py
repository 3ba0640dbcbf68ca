"""`piwf-host` (piwf_actors.cli.host) as a script file, for `testsupport.HostScript`: the real host command,
its arguments (`--project` …) and its logging, in a process of its own."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from piwf_actors.cli.host import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
