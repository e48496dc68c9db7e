"""``python -m runner`` runs the ``attested-replay`` CLI."""

import sys

from runner.cli import main

sys.exit(main())
