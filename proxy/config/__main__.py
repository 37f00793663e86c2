"""`python -m proxy.config > config/kafkalens.yaml`: the documented default file."""

import sys

from proxy.config import documented_file

sys.stdout.write(documented_file())
