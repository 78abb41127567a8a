"""``python -m rollout.ctl``: create, follow and steer rollouts from a terminal or a pipeline (docs/ctl.md).

The server comes from ``--server`` or ``ROLLOUT_SERVER``; the API key only from ``ROLLOUT_API_KEY`` (a key
on a command line ends up in shell histories and process lists: there is no option for it).

Exit status: 0 done; 1 an error (the API's ``code`` and ``detail`` on stderr; usage errors too, so that
1 is every error); for ``wait`` and ``status --watch``: 2 the rollout paused, 3 it was aborted, denied or
superseded, 4 ``--timeout`` passed; for ``labels``: 5 no node matched.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from rollout.ctl import commands
from rollout.ctl.client import Api, ApiError
from rollout.ctl.follow import EXIT_ERROR
from rollout.ctl.gate_args import SYNTAX, gate, gates_file
from rollout.ctl.show import Output

PROG = "python -m rollout.ctl"
DESCRIPTION = """Create, follow and steer rollouts (docs/ctl.md).

The server comes from --server or ROLLOUT_SERVER; the API key only from ROLLOUT_API_KEY.
Exit status: 0 done, 1 an error; wait and status --watch: 2 paused, 3 aborted, denied or superseded,
4 --timeout passed; labels: 5 no node matched."""
ROLLOUT_STATES = ["scheduled", "awaiting_approval", "active", "paused", "completed", "aborted", "denied", "superseded"]
NODE_STATES = ["pending", "in_flight", "succeeded", "failed", "skipped", "rolled_back", "cancelled"]
ACTIONS = {
    "pause": "stop starting nodes (those in flight settle)",
    "resume": "start nodes again",
    "promote": "end the current wave's soak now",
    "start": "start a scheduled rollout now",
    "approve": "approve a rollout that awaits approval",
    "deny": "deny a rollout that awaits approval (ends it)",
    "abort": "end the rollout; --rollback sends the nodes in flight back (succeeded ones keep the release)",
}


class Parser(argparse.ArgumentParser):
    """Usage errors exit 1, like every other error: ``wait``'s 2 means "paused", never "bad arguments"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _listed(convert: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"{text!r} has an empty item")
        try:
            return [convert(item) for item in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return parse


def _number(text: str) -> int | float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a number")
    return int(value) if value.is_integer() and "." not in text else value


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{text!r} is not KEY=VALUE")
    return key, value


def _seconds(text: str, *, least: float = 0.001) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= least):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (at least {least:g})")
    return value


def _timeout(text: str) -> float:
    """0 is allowed: read once, then the verdict or 4."""
    return _seconds(text, least=0)


def build_parser() -> argparse.ArgumentParser:
    # --server and --output are read before or after the command: the command's copies leave the value
    # alone unless given (SUPPRESS), so `ctl --output json list` and `ctl list --output json` agree.
    shared = Parser(add_help=False)
    shared.add_argument("--server", default=argparse.SUPPRESS, help="http://host:port (default: $ROLLOUT_SERVER)")
    shared.add_argument("--output", choices=["text", "json"], default=argparse.SUPPRESS, help="json: the API's JSON")

    parser = Parser(prog=PROG, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=None, help="http://host:port (default: $ROLLOUT_SERVER)")
    parser.add_argument("--output", choices=["text", "json"], default="text", help="json: the API's JSON")
    verbs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    def verb(name: str, run: Callable[..., int], help: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, parents=[shared], help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    create = verb("create", commands.create, "create a rollout (or plan one with --dry-run)")
    create.add_argument("version")
    create.add_argument("--pools", type=_listed(str), help="pool names or ids, comma-separated (default: all)")
    create.add_argument("--selector", help="only the nodes whose labels match (Kubernetes' selector syntax)")
    create.add_argument("--waves", type=_listed(_number), help="cumulative percentages, e.g. 1,10,100")
    create.add_argument("--soak", type=int, metavar="SECONDS", help="wait between waves")
    create.add_argument("--timeout", type=int, metavar="SECONDS", help="a node's upgrade timeout")
    create.add_argument("--max-failure-ratio", type=float, metavar="RATIO", help="a wave above it pauses")
    create.add_argument("--start-at", metavar="T", help="RFC 3339: created scheduled, starts then")
    create.add_argument("--end-by", metavar="T", help="RFC 3339: what is not done by then stops (--end-behavior)")
    create.add_argument("--end-behavior", choices=["pause", "abort", "abort_rollback"], help="at --end-by (pause)")
    create.add_argument("--min-ready", type=int, metavar="SECONDS", help="a node succeeds after staying up so long")
    create.add_argument(
        "--failure-ratio-min-settled", type=int, metavar="N", help="judge a wave's failure ratio once N settled"
    )
    create.add_argument("--gate", action="append", type=gate, metavar="GATE", help=f"repeatable: {SYNTAX}")
    create.add_argument("--gates", type=gates_file, metavar="FILE", help="a JSON list of gates as the API takes")
    create.add_argument("--gate-interval", type=int, metavar="SECONDS", help="how often each gate is asked (30)")
    create.add_argument("--gate-failure-limit", type=int, metavar="N", help="failures in a row that act (3)")
    create.add_argument("--supersedes", metavar="ID", help="end that rollout superseded; take its nodes over")
    create.add_argument("--dry-run", action="store_true", help="show the plan; create nothing")

    listing = verb("list", commands.list_rollouts, "list the rollouts (every page)")
    listing.add_argument("--state", choices=ROLLOUT_STATES)
    listing.add_argument("--page-size", type=int, default=100, help=argparse.SUPPRESS)

    status = verb("status", commands.status, "show a rollout and its waves")
    status.add_argument("id")
    status.add_argument("--watch", action="store_true", help="redraw until the rollout finishes; exit as wait does")
    status.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="--watch: give up then: exit 2 or 4")
    status.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS", help="between reads (2)")

    wait = verb(
        "wait", commands.wait, "wait for a rollout's outcome: exit 0 completed, 2 paused, 3 aborted/denied/superseded"
    )
    wait.add_argument("id")
    wait.add_argument("--timeout", type=_timeout, metavar="SECONDS", help="give up then: exit 4")
    wait.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS", help="between reads (2)")

    for action, help in ACTIONS.items():
        sub = verb(action, commands.act, help)
        sub.set_defaults(action=action)
        sub.add_argument("id")
        if action != "abort":
            sub.add_argument("--comment", metavar="C", help="recorded with it (deny: the server requires one)")
        if action == "resume":
            sub.add_argument("--end-by", metavar="T", help="RFC 3339: a new deadline")
        if action == "abort":
            sub.add_argument("--rollback", action="store_true", help="send the nodes in flight back")

    nodes = verb("nodes", commands.nodes, "list a rollout's nodes and what each waits for")
    nodes.add_argument("id")
    nodes.add_argument("--state", choices=NODE_STATES)
    nodes.add_argument("--wave", type=int, help="only this wave (counted from 1, as status shows it)")
    nodes.add_argument("--page-size", type=int, default=100, help=argparse.SUPPRESS)

    labels = verb(
        "labels", commands.labels, "set or remove labels on every node a selector matches (exit 5: none matched)"
    )
    labels.add_argument("selector", help='e.g. "zone=eu-1,gpu" ("" matches every node)')
    labels.add_argument("--set", action="append", type=_listed(_label), metavar="K=V", help="repeatable")
    labels.add_argument("--remove", action="append", type=_listed(str), metavar="K", help="repeatable")
    labels.add_argument("--pools", type=_listed(str), help="only these pools (names or ids)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Output(as_json=args.output == "json")
    server = args.server or os.environ.get("ROLLOUT_SERVER", "")
    key = os.environ.get("ROLLOUT_API_KEY", "").strip()
    try:
        if not server:
            raise ApiError("no_server", "Say which server: --server http://host:port, or set ROLLOUT_SERVER.")
        if not key:
            raise ApiError("no_api_key", "Set ROLLOUT_API_KEY to an API key (it is never taken on the command line).")
        with Api(server, key) as api:
            status: int = args.run(api, out, args)
            return status
    except ApiError as exc:
        out.error(exc)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
