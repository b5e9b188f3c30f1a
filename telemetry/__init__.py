"""Per-GPU telemetry (issue 12): utilisation and memory of every GPU over time, kept bounded.

Imports point one way: console -> telemetry -> scheduling -> workspaces -> quotas -> utilities.
Inside the app, lowest first: `models`, `synthetic` (plain curves, no Django); `selectors`
(reads); `live` (publication after commit); `services` (writes), `retention` (downsampling and
pruning); `tasks`, `beat` (entry points); `charts`, `quota_charts` (the Quota page's utilisation
chart, which scheduling's page shows through scheduling.page_figures, registered in `apps`),
`templatetags`, `admin` (interfaces). docs/telemetry.md says what is kept, for how long, and why.
"""
