"""Per-GPU telemetry (issue 12): utilisation and memory of every GPU over time, kept bounded.

Imports point one way: console -> telemetry -> scheduling -> workspaces -> quotas. Inside the app,
lowest first: `models`, `synthetic` (plain curves, no Django); `selectors` (reads); `live`
(publication after commit); `services` (writes); `tasks`, `beat` (entry points); `charts`,
`templatetags`, `admin` (interfaces). docs/telemetry.md says what is kept, for how long, and why.
"""
