"""The bottom of the project: what every app's pages, API and admin share, and nothing of any app.

Named after NetBox's `utilities`, which holds the same kind of thing there. Imports point down to
here from every app (console -> telemetry -> scheduling -> workspaces -> quotas -> utilities), and
from here only to Django, DRF and the standard library (tests/test_layering.py):

- `pagekit`: form -> Preview -> Confirm for every action form, with its templates (`kit/`).
- `json_types`: request serializers refuse a value of the wrong JSON kind.
- `admin`: the read-only admin bases of rows that only services write.
- `validation`: a ValidationError in the shape of API errors and dry-run answers.
"""
