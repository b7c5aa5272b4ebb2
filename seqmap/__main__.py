"""``python -m seqmap`` runs the command line (see ``seqmap.cli``)."""

import sys

from seqmap.cli import main

sys.exit(main())
