"""``python -m cpstore.cli``: the command line."""

import sys

from cpstore.cli.entry import main

sys.exit(main())
