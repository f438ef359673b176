"""`python -m hipep.tools.fuzz`: see hipep.tools.fuzz.cli. The classes that travel between the
parent and its workers (cases, outcomes) live in the package's modules, not here, so they pickle
under the same names on both ends."""
import sys

from hipep.tools.fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
