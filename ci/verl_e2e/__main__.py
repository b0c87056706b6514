"""`python -m verl_e2e` is the same as the `verl-e2e` console script."""

import sys

from verl_e2e.cli.main import main

sys.exit(main())
