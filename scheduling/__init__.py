"""Jobs and their scheduling. Imports point down this list, never up (tests/scheduling/test_layering.py):

- `engine/`: the scheduler itself, plain Python; it imports only itself and the standard library.
- `models`, `clock`, `lock`, `bulk`, `beat`, `history`, `gc_pauses`: data and infrastructure;
  `job_environment`: the rules of a job's environment and image (plain Python, over quotas.bounds);
  `changes`: whether anything changed since the last commit (the beat's cycle skips otherwise);
  `pending_reasons`: the pending reasons' own table, the commit's write and the reason a job shows.
- `lifecycle`: a job's state transitions. `selectors`, `estimates`, `usage`, `agent_selectors`: reads,
  shared by pages, API and consumers; `snapshot` (the cycle's; `snapshot_rows`, the rows it decodes and
  its frame of nodes and quotas; `snapshot_moves`, the jobs that moved, logged by simulate's database),
  `quota_figures`, `metrics_reads`,
  `holders`, `invariants`, `estimate_base` (the estimate's snapshot): reads split out of `selectors`,
  which re-exports their names; `mentions`: how a job is named to a reader who may not see it;
  `resource_figures`: the CPU and memory figures of quotas in managed pools (the fair shares the
  last cycle stored, what runs now).
- `agent_beat`: reads too, the agent protocol's shapes and a beat's one read.
- `allocation_history`, `quota_charts`, `quota_in_view`: reads too, the quota charts' series and
  figures, and the Overview's quota in view;
  `page_figures`: what telemetry (above) supplies to the pages here, registered at its start.
- `live`, `events`: what is published after commit. `triggers`: asks for a cycle, through the
  runners that `apps.SchedulingConfig.ready()` hands it (the cycle and the task sit above it).
- `executors`: carry decisions out, through lifecycle and events (never services or the cycle).
- `commit_rows`, `commit`: the cycle's commit: the locked rows, the device checks and the bulk
  writes; then one method per kind of decision over them.
- `cycle`: lease and fence, snapshot -> engine -> commit, then the executor acts.
- Writes, which trigger a cycle: `submission`, `job_endings` (cancel, finish, fail, node down),
  `manual_cycle`, over `job_writes` (the actor, the events after commit); `services` re-exports
  their public names; `agent_services` (the agents' beats), over `agent_claims` (a registration's
  claim of its state directory).
- `tasks`, `providers`, `simulate/`: entry points.
- `api/`, `views`, `forms`, `templatetags/`, `admin`, `management/`: interfaces. The pages that
  show jobs beside what lower apps hold are here too, since imports point down: `quota_views`
  and `quota_actions` (Resource Quotas, the Quota page and its actions), `node_views` and `node_actions` (Nodes),
  `pool_views` (a pool's page),
  `workspace_views` (a workspace's Quotas and Usage tabs, member removal).
"""
