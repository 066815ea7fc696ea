"""``python -m hierdp`` runs the command line (see :mod:`hierdp.cli`)."""

import sys

from hierdp.cli import main

sys.exit(main())
