"""The Jinja2 environment of the few templates that render thousands of rows.

Django's template language spends most of a 1,000-quota tree in variable resolution and
localisation (about 80 % of the request in a profile); Jinja2 compiles a template to Python and
renders the same rows several times faster. Pages stay Django templates: a view renders the rows
here and hands them to its page as one safe string (scheduling.quota_views).
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment

from console.templatetags.console_format import gpus


def environment(**options: Any) -> Environment:
    # Django's backend turns autoescape on unless told otherwise; the rows hold user-chosen names.
    jinja = Environment(**options)
    jinja.filters["gpus"] = gpus
    return jinja
