import sys

from mirl.cli import main

sys.exit(main())
