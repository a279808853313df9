"""When this package was first imported (this machine's clock).

Imported first by ``sensors/__init__.py``, before anything heavy: a bound on when a command
that uses the package was exec'd (see ``sensors._cli.main._process_started``).
"""

from __future__ import annotations

import time

IMPORTED_AT = time.time()
