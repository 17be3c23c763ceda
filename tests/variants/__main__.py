"""``python -m variants`` (with tests/ and server/ on PYTHONPATH): see harness.py."""

import sys

from variants.harness import main

sys.exit(main())
