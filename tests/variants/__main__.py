"""``python -m variants`` (with tests/ and server/ on PYTHONPATH): see harness.py and fix_proof.py."""

import sys

from variants.cli import main

sys.exit(main())
