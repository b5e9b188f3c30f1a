#!/usr/bin/env python
"""Django's command-line utility for the GPU Quota Console."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    from django.core.management import execute_from_command_line

    from console.config import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as error:
        sys.stderr.write(f"error: {error}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
