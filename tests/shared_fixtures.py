"""Where the shared captures live: ``../shared/fixtures`` beside the repository.

They are not part of the project: tests read them there and skip cleanly when absent.
(A module of its own, not conftest.py: several conftest modules share that name.)
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
