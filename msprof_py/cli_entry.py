"""``python -m msprof_py.cli_entry``: the msprof console script, runnable with any Python."""

from msprof_py.cli import main

if __name__ == "__main__":
    main()
