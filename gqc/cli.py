"""The `gqc` commands: sign in, submit, list, describe, cancel, and read quotas, pools, nodes and
workspaces.

Every command prints what a person reads by default and `-o json|yaml` for scripts; failures
print the API's own sentence on stderr and exit with a code from gqc.client (docs/cli.md).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from gqc import config
from gqc.client import EXIT_NOT_FOUND, EXIT_SIGNED_OUT, EXIT_WAITS, ApiError, ConsoleClient
from gqc.inventory import NODE_COLUMNS, POOL_COLUMNS, pool_rows
from gqc.output import FORMATS, Column, emit, gpus, moment

JOB_KINDS = ("training", "inference", "notebook")
# The reason code of a job larger than every node or than the pool: no cycle admits it as asked.
EXCEEDS_CLUSTER = "exceeds_cluster"
# A name several jobs share: the newest is used, and this many ids are named on stderr.
NAMESAKES_SHOWN = 10
Command = TypeVar("Command", bound=Callable[..., Any])


class ConsoleGroup(click.Group):
    """Turns an ApiError from any command into its sentence on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as failure:
            click.echo(f"gqc: {failure.message}", err=True)
            ctx.exit(failure.exit_code)


def output_option(command: Command) -> Command:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table for people; wide adds columns; json and yaml print the API's answer.",
    )(command)


@contextmanager
def signed_in() -> Iterator[ConsoleClient]:
    credentials = config.load()
    if credentials is None:
        raise ApiError("not signed in: run `gqc login URL` first", exit_code=EXIT_SIGNED_OUT)
    with ConsoleClient(credentials.url, credentials.token) as client:
        yield client


@click.group(cls=ConsoleGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpu-quota-console", prog_name="gqc")
def cli() -> None:
    """GPU Quota Console from the terminal: submit jobs, watch them, read your quotas."""


@cli.command()
@click.argument("url")
@click.option("--username", "-u", help="Your console username; asked for when left out.")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
def login(url: str, username: str | None, password_stdin: bool) -> None:
    """Sign in to the console at URL and keep a token (mode 0600) for the other commands."""
    username = username or click.prompt("Username")
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else click.prompt("Password", hide_input=True)
    with ConsoleClient(url) as client:
        answer = client.post("auth/token/", {"username": username, "password": password})
    path = config.save(config.Credentials(url=client.url, username=username, token=answer["token"]))
    click.echo(f"Signed in to {client.url} as {username}; the token is kept in {path}.")


@cli.command()
def logout() -> None:
    """Forget the stored token on this machine (`sign out everywhere` is on the console's page)."""
    click.echo("Signed out on this machine." if config.forget() else "Not signed in.")


@cli.command()
@click.argument("name")
@click.option("--workspace", "-w", required=True, help="Workspace to submit to.")
@click.option("--quota", "-q", required=True, help="Quota the job runs on.")
@click.option("--gpus", "-g", type=float, required=True, help="GPUs per replica; fractions below 1 share a GPU.")
@click.option("--replicas", type=int, help="Replicas (workers); the server's default is 1.")
@click.option("--min-replicas", type=int, help="Elastic: fewest replicas the job may run with.")
@click.option("--priority", "-p", type=int, help="1 (lowest) to 9; the kind's default when left out.")
@click.option("--kind", type=click.Choice(JOB_KINDS), default="training", show_default=True)
@click.option("--preemptible/--non-preemptible", default=None, help="The kind's default when left out.")
@click.option("--command", "job_command", help="Shell command the job runs.")
@click.option(
    "--env",
    "-e",
    "environment",
    multiple=True,
    callback=lambda _ctx, _param, pairs: environment_of(pairs),
    metavar="NAME=VALUE",
    help="A variable set in every replica's process; repeat for more (at most 64).",
)
@click.option("--image", help="Container image, for executors that run containers (the node agent ignores it).")
@click.option("--duration", type=int, help="Seconds a job on a simulated node runs.")
@click.option("--dry-run", is_flag=True, help="Say what would happen now and submit nothing (exit 10 if it waits).")
@output_option
def submit(name: str, workspace: str, quota: str, dry_run: bool, output: str, **fields: Any) -> None:
    """Submit job NAME, or with --dry-run say whether it would start now."""
    body: dict[str, Any] = {"name": name, "workspace": workspace, "quota": quota, "dry_run": dry_run}
    body |= {
        ("command" if key == "job_command" else key): value
        for key, value in fields.items()
        if value is not None and value != {}
    }
    with signed_in() as client:
        answer = client.post("jobs/", body)
    if dry_run:
        if output in {"json", "yaml"}:
            emit(answer, output=output)
        else:
            click.echo(estimate_sentence(answer))
        if not answer["would_admit"]:
            sys.exit(EXIT_WAITS)
        return
    if output in {"json", "yaml"}:
        emit(answer, output=output)
    else:
        click.echo(f"Job {answer['id']} ({answer['name']}) submitted: {job_state_sentence(answer)}")


@cli.command("list")
@click.option("--workspace", "-w", help="Only this workspace's jobs.")
@click.option("--quota", "-q", help="Only jobs on this quota.")
@click.option("--state", "-s", help="pending, running, releasing, succeeded, failed or cancelled.")
@click.option("--owner", help="Only this user's jobs.")
@click.option("--kind", type=click.Choice(JOB_KINDS))
@click.option("--reason", help="Only jobs waiting for this reason; exceeds_cluster: those that cannot start as asked.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Newest jobs shown.")
@output_option
def list_jobs(limit: int, output: str, **filters: Any) -> None:
    """Jobs you may see, newest first."""
    with signed_in() as client:
        page = client.get("jobs/", limit=limit, **filters)
    emit(page["results"], output=output, columns=JOB_COLUMNS)


def job_argument(command: Command) -> Command:
    return click.argument("job", metavar="JOB")(command)


def resolve_job(client: ConsoleClient, job: str) -> int:
    """JOB as its id: a number is an id; anything else a name among the jobs this user may see,
    the newest of several (said on stderr, with how to pick another), as `runai` and `kubectl`
    take names."""
    if job.isdecimal():
        return int(job)
    page = client.get("jobs/", name=job, limit=NAMESAKES_SHOWN)
    named = page["results"]
    if not named:
        raise ApiError(f"no job named {job!r} that you may see", exit_code=EXIT_NOT_FOUND, status=404)
    newest = named[0]
    if page["count"] > 1:
        others = ", ".join(str(other["id"]) for other in named[1:])
        more = "…" if page["count"] > len(named) else ""
        click.echo(
            f"gqc: {page['count']} jobs you may see are named {job}; using the newest, "
            f"{newest['id']} (submitted {moment(newest.get('submitted_at'))}). "
            f"The others: {others}{more}; give an id to pick one.",
            err=True,
        )
    return int(newest["id"])


@cli.command()
@job_argument
@output_option
def describe(job: str, output: str) -> None:
    """A job's state, why it waits, where it runs, and its events. JOB is its id or its name."""
    with signed_in() as client:
        job_id = resolve_job(client, job)
        record = client.get(f"jobs/{job_id}/")
        events = client.get(f"jobs/{job_id}/events/")
        if output in {"json", "yaml"}:
            emit({**record, "events": events}, output=output)
            return
        # A job runs on its quota's pool's nodes only; the job's answer names the quota alone.
        quota = client.get("quotas/", name=record["quota"])["results"]
    click.echo(job_description({**record, "pool": quota[0]["pool"] if quota else None}))
    click.echo("\nEvents:")
    emit(events, output=output, columns=EVENT_COLUMNS)


@cli.command()
@job_argument
@click.option("--dry-run", is_flag=True, help="Say what cancelling would do and change nothing.")
@output_option
def cancel(job: str, dry_run: bool, output: str) -> None:
    """Cancel a job you own, or any job of a workspace you operate or administer. JOB is its id or its name."""
    with signed_in() as client:
        job_id = resolve_job(client, job)
        answer = client.post(f"jobs/{job_id}/cancel/", {"dry_run": dry_run})
    if output in {"json", "yaml"}:
        emit(answer, output=output)
    elif dry_run:
        click.echo(f"Would cancel job {job_id}." if answer["valid"] else f"Refused: {answer['errors']}")
    else:
        click.echo(f"Job {answer['id']} ({answer['name']}): {job_state_sentence(answer)}")


@cli.command()
@job_argument
@output_option
def logs(job: str, output: str) -> None:
    """The last lines of a job's output, as its node agents shipped them. JOB is its id or its name."""
    with signed_in() as client:
        answer = client.get(f"jobs/{resolve_job(client, job)}/logs/")
    if output in {"json", "yaml"}:
        emit(answer, output=output)
        return
    if answer["truncated"]:
        click.echo("(earlier lines dropped: the console keeps the last lines only)", err=True)
    for line in answer["lines"]:
        click.echo(line)


@cli.command()
@output_option
def quotas(output: str) -> None:
    """The quotas you may see: guarantee, limit, fair share and what is allocated now."""
    with signed_in() as client:
        records = client.get_all("quotas/")
    emit(records, output=output, columns=QUOTA_COLUMNS)


@cli.command()
@output_option
def pools(output: str) -> None:
    """The pools you may see, each with its nodes, GPUs and quotas (its roots and what they guarantee)."""
    with signed_in() as client:
        rows = pool_rows(client.get_all("pools/"), client.get_all("nodes/"), client.get_all("quotas/"))
    emit(rows, output=output, columns=POOL_COLUMNS)


@cli.command()
@click.option("--pool", help="Only this pool's nodes.")
@output_option
def nodes(pool: str | None, output: str) -> None:
    """The nodes, with their pool, state, GPUs and GPU model."""
    with signed_in() as client:
        records = client.get_all("nodes/", **({"pool": pool} if pool else {}))
    emit(records, output=output, columns=NODE_COLUMNS)


@cli.command()
@output_option
def workspaces(output: str) -> None:
    """The workspaces you belong to (all of them for platform admins) and their quotas."""
    with signed_in() as client:
        records = client.get_all("workspaces/")
    emit(records, output=output, columns=WORKSPACE_COLUMNS)


def job_state_sentence(job: dict[str, Any]) -> str:
    """`running on dgx-1` or `pending (3rd in queue): <the reason's sentence>`."""
    reason_code = (job.get("reason") or {}).get("code")
    if job["state"] == "pending" and reason_code == EXCEEDS_CLUSTER:
        return f"pending, cannot start: {job['reason']['message']} (it asks more than the cluster has)"
    if job["state"] == "pending":
        position = f", position {job['position']} in the queue" if job.get("position") else ""
        reason = f": {job['reason']['message']}" if job.get("reason") else ""
        return f"pending{position}{reason}"
    if job.get("nodes"):
        return f"{job['state']} on {', '.join(job['nodes'])}"
    return str(job["state"])


def estimate_sentence(preview: dict[str, Any]) -> str:
    """The dry-run's answer as the Submit job page says it: where it starts, or why it waits."""
    if preview["would_admit"]:
        devices: dict[str, list[int]] = defaultdict(list)
        for placement in preview["placements"]:
            devices[placement["node"]].extend(placement["devices"])
        where = "; ".join(f"{node}, GPUs {','.join(map(str, sorted(indices)))}" for node, indices in devices.items())
        victims = "; ".join(victim_words(victim) for victim in preview["evict"])
        evicting = f" (evicting {plural(len(preview['evict']), 'job')}: {victims})" if preview["evict"] else ""
        return f"Starts now on {where}{evicting}." if where else f"Starts now{evicting}."
    reason = preview.get("reason") or {}
    if reason.get("code") == EXCEEDS_CLUSTER:
        return (
            f"Cannot start: {reason.get('message')} ({EXCEEDS_CLUSTER}); "
            "submitted, it would wait until the cluster grows"
        )
    return f"Waits: {reason.get('message', 'the next cycle would not admit it')} ({reason.get('code', 'pending')})"


def environment_of(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--env NAME=VALUE`, repeated, as the API's environment; the console judges names and sizes."""
    environment: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"{pair[:40]!r} is not NAME=VALUE", param_hint="--env")
        if name in environment:
            raise click.BadParameter(f"{name} is given twice", param_hint="--env")
        environment[name] = value
    return environment


def victim_words(victim: dict[str, Any]) -> str:
    """A job the dry run would evict: `train-b, 8 GPUs of Quota1.2 (workspace-c)`; one of a
    workspace you cannot open comes without its name (the API leaves it out)."""
    description = victim.get("description") or f"{gpus(victim.get('gpus'))} GPUs of {victim.get('quota')}"
    return f"{victim['job']}, {description}" if victim.get("job") else description


def beneficiary_words(event: dict[str, Any]) -> str | None:
    """The job an event made room for: its name, or where you may not see it, whose it is."""
    other = event.get("beneficiary_job") or {}
    return event.get("beneficiary") or other.get("description")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def job_description(job: dict[str, Any]) -> str:
    placements = [
        f"{placement['node']} GPUs {','.join(map(str, placement['devices']))}"
        + (f" ({placement['fraction']} each)" if placement.get("fraction") not in (None, 1, 1.0) else "")
        for placement in job.get("placements", [])
    ]
    shape = f"{gpus(job['gpus'])} × {plural(job['replicas'], 'replica')}; {gpus(job['allocated_gpus'])} allocated"
    fields = [
        ("Job", f"{job['id']} {job['name']}"),
        ("Workspace / quota", f"{job['workspace']} / {job['quota']}"),
        ("Pool", job.get("pool") or "-"),
        ("Owner", job.get("owner") or "-"),
        ("Kind, priority", f"{job['kind']}, {job['priority']}{'' if job['preemptible'] else ', non-preemptible'}"),
        ("GPUs", shape),
        ("State", job_state_sentence(job)),
        ("Placement", "; ".join(placements) or "-"),
        *([("Slurm jobs", ", ".join(map(str, job["slurm_job_ids"])))] if job.get("slurm_job_ids") else []),
        ("Image", job.get("image") or "-"),
        (
            "Environment",
            "\n".join(f"{name}={value}" for name, value in sorted((job.get("environment") or {}).items())) or "-",
        ),
        ("Submitted", moment(job.get("submitted_at")) or "-"),
        ("Started", moment(job.get("started_at")) or "-"),
        ("Finished", moment(job.get("finished_at")) or "-"),
    ]
    width = max(len(title) for title, _ in fields)
    # A value of several lines (the environment, one variable a line) keeps its column.
    return "\n".join(
        f"{title + ':':<{width + 1}} {value}".replace("\n", "\n" + " " * (width + 2)) for title, value in fields
    )


JOB_COLUMNS = (
    Column("ID", lambda job: job["id"]),
    Column("NAME", lambda job: job["name"]),
    Column("WORKSPACE", lambda job: job["workspace"]),
    Column("QUOTA", lambda job: job["quota"]),
    Column("STATE", lambda job: job["state"]),
    Column("GPUS", lambda job: f"{gpus(job['allocated_gpus'])}/{gpus(job['gpus'] * job['replicas'])}"),
    Column("POSITION", lambda job: job.get("position")),
    Column("REASON", lambda job: (job.get("reason") or {}).get("code")),
    Column("KIND", lambda job: job["kind"], wide_only=True),
    Column("PRIORITY", lambda job: job["priority"], wide_only=True),
    Column("OWNER", lambda job: job.get("owner"), wide_only=True),
    Column("NODES", lambda job: job.get("nodes"), wide_only=True),
    Column("SUBMITTED", lambda job: moment(job.get("submitted_at")), wide_only=True),
)
EVENT_COLUMNS = (
    Column("AT", lambda event: moment(event.get("at"))),
    Column("EVENT", lambda event: event.get("kind")),
    Column("RULE", lambda event: event.get("rule")),
    Column("FOR", beneficiary_words),
    Column("MESSAGE", lambda event: event.get("message")),
)
QUOTA_COLUMNS = (
    Column("NAME", lambda quota: quota["name"]),
    Column("PARENT", lambda quota: quota.get("parent")),
    Column("GUARANTEED", lambda quota: quota["gpus"]),
    Column("LIMIT", lambda quota: quota.get("limit")),
    Column("FAIR-SHARE", lambda quota: quota["status"]["fair_share"]),
    Column("ALLOCATED", lambda quota: quota["status"]["allocated"]),
    Column("RUNNING", lambda quota: quota["status"]["running"]),
    Column("PENDING", lambda quota: quota["status"]["pending"]),
    Column("POOL", lambda quota: quota.get("pool")),
    Column("WEIGHT", lambda quota: quota.get("weight"), wide_only=True),
    Column("RANK", lambda quota: quota.get("rank"), wide_only=True),
    Column("CHILD-PREEMPTION", lambda quota: quota.get("child_preemption"), wide_only=True),
    Column("SAME-LEVEL", lambda quota: quota.get("same_level_preemption"), wide_only=True),
)
WORKSPACE_COLUMNS = (
    Column("ID", lambda workspace: workspace["id"]),
    Column("NAME", lambda workspace: workspace["name"]),
    Column("QUOTAS", lambda workspace: workspace.get("quotas")),
    Column("DESCRIPTION", lambda workspace: workspace.get("description"), wide_only=True),
)


def main() -> None:
    cli(prog_name="gqc")
