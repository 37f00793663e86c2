"""`python -m proxy.config > config/kafkalens.yaml`: the documented default file, every
key of the core and of each feature (a command: nothing imports it)."""

import sys

from proxy.features import documented_file

sys.stdout.write(documented_file())
