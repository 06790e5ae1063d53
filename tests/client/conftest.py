"""The client library lives in its own distribution (clients/python); the tests import it from the tree."""

import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(CLIENT) not in sys.path:
    sys.path.insert(0, str(CLIENT))
