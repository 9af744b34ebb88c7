"""Where the tests find the repository's files, whichever folder a test lives in."""

from pathlib import Path

TESTBENCHES = Path(__file__).resolve().parent
REPO = TESTBENCHES.parent
EXAMPLES = REPO / "examples"
DOCS = REPO / "docs"
EXPECTED = TESTBENCHES / "expected"       # golden files (pytest --update-golden)
