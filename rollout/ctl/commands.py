"""One function per command: it asks the API and prints the answer (rollout/ctl/show.py).

Each takes the ``Api``, the ``Output`` and the parsed arguments and returns the exit status. Bodies carry
only the options given, so the server's defaults stay the server's.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from rollout.ctl import follow
from rollout.ctl.client import Api, ApiError
from rollout.ctl.nodes import node_names, wave_index
from rollout.ctl.outcome import chain, ending, ending_events, gates_of, gates_table
from rollout.ctl.show import Output, nodes_table, plan_view, progress_line, rollout_view, rollouts_table

UUID_SHAPE = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")


def pool_names(api: Api) -> dict[str, str]:
    """``{pool id: name}`` of the tenant's pools (every page)."""
    return {pool["id"]: pool["name"] for pool in api.pages("pools/", {"limit": "1000"})}


def pool_ids(given: list[str], names: dict[str, str]) -> list[str]:
    """Pool names and ids as the API's ``poolIds``: a name is looked up in the pools list; an id is kept
    as it is (the server answers ``unknown_pool`` for an id that is not the tenant's)."""
    by_name = {name: pool_id for pool_id, name in names.items()}
    chosen: list[str] = []
    for item in given:
        if item in names or (item not in by_name and UUID_SHAPE.match(item)):
            chosen.append(item)
        elif item in by_name:
            chosen.append(by_name[item])
        else:
            raise ApiError("unknown_pool", f"No pool is named {item!r} (nor has that id).", extra={"poolIds": [item]})
    return chosen


def _options(args: argparse.Namespace, names: dict[str, str]) -> dict[str, Any]:
    """The API's fields for the options given on the command line: ``{argument: field}``."""
    return {field: getattr(args, arg) for arg, field in names.items() if getattr(args, arg, None) is not None}


def _names_for_text(api: Api, out: Output) -> dict[str, str]:
    """Pool names to show instead of ids; JSON output is the API's own and needs none."""
    return {} if out.as_json else pool_names(api)


def create(api: Api, out: Output, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"version": args.version}
    names = pool_names(api) if args.pools else _names_for_text(api, out)
    if args.pools:
        body["poolIds"] = pool_ids(args.pools, names)
    body |= _options(
        args,
        {
            "selector": "selector",
            "waves": "waves",
            "soak": "soakSeconds",
            "timeout": "upgradeTimeoutSeconds",
            "max_failure_ratio": "maxFailureRatio",
            "start_at": "startAt",
            "end_by": "endBy",
            "end_behavior": "endBehavior",
            "min_ready": "minReadySeconds",
            "failure_ratio_min_settled": "failureRatioMinSettled",
            "gate_interval": "gateIntervalSeconds",
            "gate_failure_limit": "gateFailureLimit",
            "supersedes": "supersedes",
        },
    )
    gates = [*(args.gates or []), *(args.gate or [])]
    if gates:
        body["gates"] = gates
    if args.dry_run:
        plan = api.post("rollouts/", body, params={"dryRun": "true"})
        planned = plan.get("gates") if isinstance(plan.get("gates"), list) else None
        out.result(plan, plan_view(plan, names, gates=gates_table(planned) if planned else None))
        return follow.EXIT_OK
    rollout = api.post("rollouts/", body)
    out.result(rollout, rollout_view(rollout, names))
    return follow.EXIT_OK


def list_rollouts(api: Api, out: Output, args: argparse.Namespace) -> int:
    params = {"limit": str(args.page_size)}
    if args.state:
        params["state"] = args.state
    rollouts = list(api.pages("rollouts/", params))
    # All the pages in the list's own shape, as if one page had held them.
    out.result({"results": rollouts, "next": None}, rollouts_table(rollouts))
    return follow.EXIT_OK


def status(api: Api, out: Output, args: argparse.Namespace) -> int:
    names: dict[str, str] = {}

    def draw(rollout: dict[str, Any]) -> Any:
        """The rollout, how it ended, its supersede chain and its gates' latest results. The pools' names are
        read at the first drawing the server answers (a watch that starts in an outage rides it out with ids)."""
        if not names and not out.as_json:
            try:
                names.update(pool_names(api))
            except ApiError as exc:
                if not exc.transient:
                    raise
        gates = gates_of(api, rollout["id"])
        return rollout_view(
            rollout,
            names,
            more=[*ending(rollout, ending_events(api, rollout)), *chain(rollout)],
            gates=gates_table(gates) if gates else None,
        )

    if args.watch:
        return follow.watch(api, out, args.id, interval=args.interval, timeout=args.timeout, draw=draw)
    rollout = api.get(f"rollouts/{args.id}/")
    out.result(rollout, rollout if out.as_json else draw(rollout))
    return follow.EXIT_OK


def wait(api: Api, out: Output, args: argparse.Namespace) -> int:
    return follow.wait(api, out, args.id, interval=args.interval, timeout=args.timeout)


def act(api: Api, out: Output, args: argparse.Namespace) -> int:
    """pause, resume, promote, start, approve, deny, abort: one POST each, the rollout as it stands after."""
    body = _options(args, {"comment": "comment", "end_by": "endBy", "rollback": "rollback"})
    rollout = api.post(f"rollouts/{args.id}/{args.action}/", body or None)
    out.result(rollout, progress_line(rollout))
    return follow.EXIT_OK


def nodes(api: Api, out: Output, args: argparse.Namespace) -> int:
    """The rollout's node rows; ``--wave`` counts from 1 as ``status`` shows it (the API's ``wave`` from 0)."""
    params = {"limit": str(args.page_size)}
    if args.state:
        params["state"] = args.state
    if args.wave is not None:
        params["wave"] = str(wave_index(api.get(f"rollouts/{args.id}/"), args.wave))
    rows = list(api.pages(f"rollouts/{args.id}/nodes/", params))
    names = {} if out.as_json else node_names(api, rows)
    out.result({"results": rows, "next": None}, nodes_table(rows, names))
    return follow.EXIT_OK


def labels(api: Api, out: Output, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"selector": args.selector}
    if args.pools:
        body["poolIds"] = pool_ids(args.pools, pool_names(api))
    if args.set:
        body["set"] = dict(pair for group in args.set for pair in group)
    if args.remove:
        body["remove"] = [key for group in args.remove for key in group]
    answer = api.post("nodes/labels/", body)
    matched = answer.get("matched")
    out.result(answer, f"{matched} node{'' if matched == 1 else 's'} matched")
    if matched == 0:
        out.errors.print(f"error: no node matched the selector {args.selector!r}: nothing was changed")
        return follow.EXIT_NO_MATCH
    return follow.EXIT_OK
