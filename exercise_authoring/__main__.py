"""python -m exercise_authoring: see the package's docstring."""

import sys

from . import main

sys.exit(main())
