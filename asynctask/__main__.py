import sys

from asynctask.cli import main

sys.exit(main())
