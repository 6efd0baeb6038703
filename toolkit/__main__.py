"""Allow ``python -m toolkit``."""

from toolkit.cli import main

if __name__ == "__main__":
    main()
