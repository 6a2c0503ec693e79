"""Plain helpers shared by test files, where a fixture does not fit (they take arguments and are
called inside tests and module fixtures). Importable as ``helpers``: pyproject's pytest
``pythonpath`` puts tests/ on sys.path."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
